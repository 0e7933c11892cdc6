"""``localspec embed``: embeddings of a text, or of each line of stdin, as JSON Lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Optional

import typer

from localspec.cli._common import CtxSize, GpuLayers, Offline, Threads, Verbose, settings_from_context, user_errors
from localspec.defaults import DEFAULTS as D
from localspec.errors import InvalidRequest

HELP = ("Print embeddings (unit vectors, the model's own pooling, mean where it declares none) as JSON Lines: "
        "one for TEXT, or one for each non-blank line of stdin.")
EPILOG = ("Examples:  localspec embed nomic-embed-text-v1.5.f16.gguf 'a sentence'  ·  "
          "cat notes.txt | localspec embed MODEL - > vectors.jsonl")
CHUNK = 256  # lines embedded (and written) at a time: a long stdin never waits whole in memory


def _lines() -> Iterator[str]:
    for line in sys.stdin:
        text = line.rstrip("\r\n")
        if text.strip():
            yield text


def _chunks(texts: Iterator[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@user_errors
def embed(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(None, help="A .gguf path, org/repo[:QUANT], or a profile."),
    text: Optional[str] = typer.Argument(None, help="The text; '-' or nothing reads one text per line of stdin."),
    ctx_size: CtxSize = D["ctx_size"],
    threads: Threads = D["threads"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    verbose: Verbose = False,
    offline: Offline = False,
) -> None:
    from localspec.cli._models import open_engine_for
    from localspec.settings import updated

    if text is None or text == "-":
        if sys.stdin.isatty():
            raise InvalidRequest("Give a TEXT to embed, or pipe texts in, one per line.")
        texts: Iterator[str] = _lines()
    else:
        if not text.strip():
            raise InvalidRequest("The text to embed is empty.")
        texts = iter([text])
    s = updated(settings_from_context(ctx, model), {"draft": None, "spec": "off", "slots": 1}, "default")
    engine = open_engine_for(s, offline=offline, verbose=verbose)
    try:
        embedder = engine.embedder()
        index = 0
        for chunk in _chunks(texts):
            tokens = [embedder.tokenize(t) for t in chunk]
            bad = next((i for i, t in enumerate(tokens) if not t or len(t) > embedder.n_ctx), None)
            good = tokens if bad is None else tokens[:bad]
            for t, v in zip(good, embedder.embed(good) if good else []):  # the lines before a bad one are kept
                sys.stdout.write(json.dumps({"index": index, "tokens": len(t), "embedding": [float(x) for x in v]}) + "\n")
                index += 1
            sys.stdout.flush()
            if bad is not None:
                what = "The text" if text not in (None, "-") else f"Input {index + 1} (a line of stdin)"
                t = tokens[bad]
                raise InvalidRequest(f"{what} gives no tokens." if not t else
                                     f"{what} is {len(t)} tokens; the embedding context holds {embedder.n_ctx} "
                                     "(raise --ctx-size).")
    finally:
        engine.close()
