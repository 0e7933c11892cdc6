"""Embeddings, from ``serve``'s /v1/embeddings (the official ``openai`` SDK on a real
subprocess) and ``localspec embed``: equal to llama-cpp-python's own ``Llama.embed`` on
the same file, for a real embedding model (nomic-embed-text, mean pooling declared) and a
decoder model pooled by mean (SmolLM2); bad input refused by field."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from .test_serve import Server

pytestmark = pytest.mark.smollm

CLI = [sys.executable, "-m", "localspec"]
TEXTS = ["The cat sat on the mat.", "Embeddings map text to vectors.", "a",
         "Paris is the capital of France, and its largest city. " * 6]
NOMIC, SMOL = "nomic-embed-text-v1.5.f16", "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def reference(nomic_embed: Path, smollm2: Path) -> dict[str, list[np.ndarray]]:
    """llama-cpp-python's vectors, one text at a time (SmolLM2 declares no pooling: mean)."""
    import llama_cpp

    out = {}
    for name, path, kw in ((NOMIC, nomic_embed, {}), (SMOL, smollm2, {"pooling_type": llama_cpp.LLAMA_POOLING_TYPE_MEAN})):
        llm = llama_cpp.Llama(str(path), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512, verbose=False, **kw)
        out[name] = [np.array(llm.embed(t, normalize=True)) for t in TEXTS]
        out[name + ":tokens"] = [llm.tokenize(t.encode()) for t in TEXTS]
        llm.close()
    return out


@pytest.fixture(scope="module")
def server(nomic_embed: Path, smollm2: Path) -> Iterator[Server]:
    srv = Server([nomic_embed, smollm2], "--ctx-size", "512", "--slots", "1")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("model", [NOMIC, SMOL])
def test_vectors_equal_llama_cpp_pythons(server: Server, reference, model: str) -> None:
    client = server.client()
    one = client.embeddings.create(model=model, input=TEXTS[0])  # the SDK asks for base64 and decodes it
    assert len(one.data) == 1 and one.data[0].index == 0 and one.model == model
    assert cosine(one.data[0].embedding, reference[model][0]) > 1 - 1e-4
    assert abs(np.linalg.norm(one.data[0].embedding) - 1) < 1e-5  # unit length, as OpenAI's
    assert one.usage.prompt_tokens == one.usage.total_tokens == len(reference[model + ":tokens"][0])
    many = client.embeddings.create(model=model, input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == list(range(len(TEXTS)))
    for got, want in zip(many.data, reference[model]):
        assert cosine(got.embedding, want) > 1 - 1e-4
    assert many.usage.prompt_tokens == sum(map(len, reference[model + ":tokens"]))
    # base64 is the same floats; token ids give what their text gives
    status, raw = server.post("/v1/embeddings", {"model": model, "input": TEXTS, "encoding_format": "base64"})
    assert status == 200
    for got, floats in zip(raw["data"], many.data):
        assert np.array_equal(np.frombuffer(base64.b64decode(got["embedding"]), dtype="<f4"),
                              np.asarray(floats.embedding, dtype=np.float32))
    ids = client.embeddings.create(model=model, input=reference[model + ":tokens"][1], encoding_format="float")
    assert cosine(ids.data[0].embedding, reference[model][1]) > 1 - 1e-4
    assert len(one.data[0].embedding) == (768 if model == NOMIC else 576)


def test_bad_input_is_refused_by_field_and_the_server_goes_on(server: Server) -> None:
    client = server.client()
    for body, param in [
        ({"model": NOMIC, "input": ""}, "input"),
        ({"model": NOMIC, "input": []}, "input"),
        ({"model": NOMIC, "input": ["ok", ""]}, "input"),
        ({"model": NOMIC, "input": [[1, 2], []]}, "input"),
        ({"model": NOMIC, "input": [5, 10 ** 9]}, "input"),
        ({"model": NOMIC, "input": [-3]}, "input"),
        ({"model": NOMIC, "input": "word " * 600}, "input"),
        ({"model": NOMIC, "input": "x", "dimensions": 256}, "dimensions"),
        ({"model": NOMIC, "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": NOMIC, "input": 3.5}, "input"),
        ({"model": NOMIC, "input": ["x"] * 3000}, "input"),
        ({"model": NOMIC, "input": "x", "keep_alive": "soon"}, "keep_alive"),
        ({"model": "no-such-model", "input": "x"}, "model"),
        ({"model": NOMIC}, "input"),
    ]:
        status, answer = server.post("/v1/embeddings", body)
        assert 400 <= status < 500 and answer["error"]["param"] == param, (body, status, answer)
        assert answer["error"]["message"]
    assert server.post("/v1/embeddings", b"{not json")[0] == 400
    # an embedding model does not chat; the other model still does
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=NOMIC, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=4).choices[0].message.content
    ok = client.embeddings.create(model=NOMIC, input="x", dimensions=768)
    assert len(ok.data[0].embedding) == 768
    assert "localspec_embeddings" in server.get("/metrics")[1]["raw"]


def embed_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + ["embed", *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_embed_prints_json_lines(nomic_embed: Path, reference) -> None:
    got = embed_cli(str(nomic_embed), TEXTS[0])
    assert got.returncode == 0, got.stderr
    (record,) = [json.loads(line) for line in got.stdout.splitlines()]
    assert record["index"] == 0 and record["tokens"] == len(reference[NOMIC + ":tokens"][0])
    assert cosine(record["embedding"], reference[NOMIC][0]) > 1 - 1e-4
    piped = embed_cli(str(nomic_embed), "-", stdin="\n".join(TEXTS[:3]) + "\n\n")
    assert piped.returncode == 0, piped.stderr
    records = [json.loads(line) for line in piped.stdout.splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2]
    for r, want in zip(records, reference[NOMIC]):
        assert cosine(r["embedding"], want) > 1 - 1e-4
    for args, stdin, message in [
        ((str(nomic_embed), ""), None, "error: The text to embed is empty."),
        ((str(nomic_embed), "-", "--ctx-size", "64"), "short\n" + "word " * 100 + "\n", "error: Input 2 (a line of stdin) is"),
        (("/no/such/model.gguf", "hi"), None, "error: No model file at /no/such/model.gguf."),
    ]:
        bad = embed_cli(*args, stdin=stdin)
        assert bad.returncode == 1 and bad.stderr.startswith(message) and len(bad.stderr.strip().splitlines()) == 1, \
            bad.stderr
        assert "Traceback" not in bad.stderr
        if stdin:  # the lines before the bad one are printed
            assert [json.loads(line)["index"] for line in bad.stdout.splitlines()] == [0]


def test_batches_across_sequences_and_context_equal_one_at_a_time(tiny_model: Path) -> None:
    """More inputs than one batch holds (sequences and tokens): each vector equals the one
    embedded alone (the tiny f32 model: exact to rounding)."""
    from localspec.engine import Engine, EngineConfig
    from localspec.engine.embed import MAX_SEQS

    with Engine(tiny_model, EngineConfig(n_ctx=128, n_slots=1)) as engine:
        embedder = engine.embedder()
        assert embedder is engine.embedder() and embedder.pooling_name == "mean" and not engine.is_embedding_model
        texts = [("abc " * (1 + i % 9)).strip() for i in range(MAX_SEQS + 7)] + ["x" * 120]
        tokens = [embedder.tokenize(t) for t in texts]
        together = embedder.embed(tokens)
        for toks, v in zip(tokens, together):
            alone = embedder.embed([toks])[0]
            assert cosine(v, alone) > 1 - 1e-6 and abs(np.linalg.norm(v) - 1) < 1e-5
        with pytest.raises(Exception, match="129 tokens"):
            embedder.embed([[1] * 129])
