"""The handover to a cluster engine: the command line that serves the same model on vLLM
or SGLang, with the same name, slots, context, speculation and sampling defaults.

Nothing is imitated: the engines run their own code; this only maps our settings onto
their documented flags (vLLM's ``vllm serve``, SGLang's ``sglang.launch_server``). What
has no counterpart is said in ``Handover.notes``, never dropped silently.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from localspec.errors import InvalidRequest, LocalspecError
from localspec.settings import Settings

ENGINES = ("vllm", "sglang")
Engine = Literal["vllm", "sglang"]

# localspec picks each step's draft length from measured costs, up to draft_max; vLLM and
# SGLang verify a fixed number every step, so the export fixes one (never above
# draft_max). The values are the engines' own documented examples: vLLM's draft-model
# and SGLang's STANDALONE pages draft 3-5 tokens a step, their n-gram pages 4-8 (a
# GPU verifies 8 tokens for about the price of one).
DRAFT_MODEL_TOKENS = 4
NGRAM_TOKENS = 8

# Our sampling settings -> the keys of each engine's server-wide defaults (vLLM's
# --override-generation-config takes generation_config.json's keys; SGLang's
# --preferred-sampling-params its SamplingParams). presence/frequency penalty have no
# generation_config key, so vLLM takes them per request only.
_SAMPLING: dict[str, dict[str, str]] = {
    "vllm": {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
             "repeat_penalty": "repetition_penalty", "max_tokens": "max_new_tokens"},
    "sglang": {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
               "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
               "frequency_penalty": "frequency_penalty", "max_tokens": "max_new_tokens"},
}


@dataclass(frozen=True)
class Weights:
    """What an engine loads for one model: a Hub repo of original weights, or a GGUF
    (a path, or ``repo:QUANT`` for vLLM to fetch), and how we know."""

    model: str
    gguf: bool
    how: str  # "the profile's source", "the GGUF's general.source", "the GGUF file"
    parts: int = 1


@dataclass(frozen=True)
class Handover:
    engine: Engine
    argv: list[str]
    notes: list[str] = field(default_factory=list)

    def shell(self, title: str) -> str:
        """A POSIX shell script: the notes as comments, then the command, a flag a line."""
        words = [shlex.quote(a) for a in self.argv]
        head = 3  # `vllm serve MODEL`, `python -m sglang.launch_server`
        command = [" ".join(words[:head])]
        i = head
        while i < len(words):
            take = 2 if i + 1 < len(words) and not self.argv[i + 1].startswith("--") else 1
            command.append(" ".join(words[i:i + take]))
            i += take
        lines = ["#!/bin/sh", f"# {title}", *(f"# - {n}" for n in self.notes)]
        return "\n".join([*lines, " \\\n  ".join(command)]) + "\n"

    def record(self) -> dict:
        return {"engine": self.engine, "argv": self.argv, "command": shlex.join(self.argv), "notes": self.notes}


def weights_of(name: str, source: str | None, *, offline: bool = False) -> Weights:
    """The weights an engine should load for ``name`` (a Hub name or a .gguf path): the
    ``source`` repo where one is given, else the one the GGUF's header names, else the
    GGUF itself. A Hub GGUF's header is read from the cache or with range requests."""
    if source:
        return Weights(source, False, "the profile's source")
    from localspec.resolve import Hub, check_gguf, looks_like_hub, parse_hub
    from localspec.resolve.gguf_info import read_header, read_info, split_parts

    if looks_like_hub(name):
        ref = parse_hub(name)
        try:
            info, choice, listing, local = Hub.from_env(offline=offline).inspect(ref)
        except LocalspecError as exc:
            raise InvalidRequest(f"{exc.message.rstrip('.')}; give --source ORG/REPO to export {name} "
                                 "without reading its header.") from None
        if info.origin:
            return Weights(info.origin, False, "the GGUF's general.source")
        if local:
            return Weights(str(info.path), True, "the GGUF file", len(choice.parts))
        quant = choice.quant or ref.quant
        return Weights(f"{listing.repo}:{quant}" if quant else f"{listing.repo}/{choice.parts[0].path}", True,
                       "the GGUF on the Hub", len(choice.parts))
    path = check_gguf(Path(name).expanduser())
    info = read_info(path)
    if info.origin:
        return Weights(info.origin, False, "the GGUF's general.source")
    return Weights(str(path.resolve()), True, "the GGUF file", len(split_parts(path, read_header(path)[0])))


def handover(engine: str, s: Settings, *, name: str, target: Weights, draft: Weights | None) -> Handover:
    """The command line serving ``s`` on ``engine`` under the API name ``name``."""
    if engine not in ENGINES:
        raise InvalidRequest(f"cannot export to {engine!r}: the engines are {', '.join(ENGINES)}.")
    notes: list[str] = []
    if engine == "vllm":
        argv = ["vllm", "serve", target.model, "--served-model-name", name]
    else:
        argv = ["python", "-m", "sglang.launch_server", "--model-path", target.model, "--served-model-name", name]
    notes.append(f"{'weights' if not target.gguf else 'GGUF'}: {target.model} ({target.how})")
    if target.gguf:
        notes += _gguf_notes(engine, target)
    if s.ctx_size is not None:
        argv += ["--max-model-len" if engine == "vllm" else "--context-length", str(s.ctx_size)]
    argv += ["--max-num-seqs" if engine == "vllm" else "--max-running-requests", str(s.slots)]
    if s.slots < 8:
        notes.append(f"at most {s.slots} request{'s' if s.slots > 1 else ''} at a time, as the slots here; "
                     "a shared server wants more (--slots 64).")
    argv += _speculation(engine, s, draft, notes)
    argv += _sampling(engine, s, notes)
    for what, set_ in (("the system prompt", s.system), ("the JSON schema", s.json_schema)):
        if set_:
            notes.append(f"{what} of this profile is not a server setting there: send it with each request.")
    if s.kv_type != "f16":
        notes.append(f"the {s.kv_type} KV cache does not carry over (--kv-cache-dtype fp8 is the nearest).")
    return Handover(engine, argv, notes)  # type: ignore[arg-type]


def _gguf_notes(engine: str, target: Weights) -> list[str]:
    out = ["no original-weights repo is known (a profile's source:, or --source ORG/REPO, names one); "
           "the GGUF is served as is, with the tokenizer the engine rebuilds from it."]
    if target.parts > 1:
        out.append(f"the GGUF is split in {target.parts} parts: merge them first (llama.cpp's gguf-split --merge).")
    if engine == "sglang" and not Path(target.model).is_absolute():
        out.append("SGLang loads a GGUF from a local path only: `localspec pull` it, then export again.")
    return out


def _speculation(engine: str, s: Settings, draft: Weights | None, notes: list[str]) -> list[str]:
    mode = s.spec
    if mode == "off":
        return []
    if mode == "draft" and draft is None:
        raise InvalidRequest("--spec draft needs a draft model: give --draft (and --draft-source).")
    use_draft = draft is not None and mode in ("auto", "draft") and not draft.gguf
    if draft is not None and draft.gguf and mode in ("auto", "draft"):
        notes.append("the draft is a GGUF with no original-weights repo known (--draft-source names one): "
                     + ("exported as n-gram lookup instead." if mode == "auto" else "it cannot be a draft there."))
        if mode == "draft":
            raise InvalidRequest("the draft model needs its original weights there: give --draft-source ORG/REPO.")
    if use_draft:
        assert draft is not None
        k = min(DRAFT_MODEL_TOKENS, s.draft_max)
        if mode == "auto":
            notes.append("speculation: the draft model (localspec's n-gram lookup beside it does not carry over).")
        if engine == "vllm":
            return ["--speculative-config", json.dumps({"method": "draft_model", "model": draft.model,
                                                        "num_speculative_tokens": k})]
        return ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft.model,
                "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", str(k + 1)]
    k = min(NGRAM_TOKENS, s.draft_max)
    notes.append(f"speculation: n-gram lookup in the prompt, {k} tokens a step (localspec sizes each step; "
                 "its store of earlier requests does not carry over).")
    if engine == "vllm":
        return ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k,
                                                    "prompt_lookup_min": s.ngram_min,
                                                    "prompt_lookup_max": s.ngram_max})]
    notes.append("SGLang's NGRAM speculation runs on CUDA only.")
    return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(k),
            "--speculative-ngram-min-match-window-size", str(s.ngram_min),
            "--speculative-ngram-max-match-window-size", str(s.ngram_max)]


def _sampling(engine: str, s: Settings, notes: list[str]) -> list[str]:
    """localspec's sampling settings, every one, as the engine's server-wide defaults: a
    request that names none then samples alike (left out, a key would come from the
    model's generation_config there). top_k 0 (off) is their -1."""
    chosen: dict[str, float | int] = {}
    for ours, theirs in _SAMPLING[engine].items():
        value = getattr(s, ours)
        if value is not None:
            chosen[theirs] = -1 if ours == "top_k" and value == 0 else value
    for ours in ("presence_penalty", "frequency_penalty"):
        if ours not in _SAMPLING[engine] and getattr(s, ours) != 0:
            notes.append(f"{ours.replace('_', ' ')} {getattr(s, ours)} is per request there: send it with each request.")
    if s.seed is not None:
        notes.append("the seed is per request there: send it with each request.")
    flag = "--override-generation-config" if engine == "vllm" else "--preferred-sampling-params"
    return [flag, json.dumps(chosen)]
