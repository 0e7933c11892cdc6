"""``localspec info``: what a model is, from its GGUF header (remote ones without the weights)."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from localspec.cli._common import MODEL_HELP, Offline, user_errors
from localspec.cli.completion import complete_model
from localspec.outputs import terminal

HELP = (
    "Show a model's architecture, size, quant, context, tokenizer and chat template; for a Hub "
    "model not yet downloaded it reads just the GGUF header with HTTP range requests."
)
EPILOG = "Examples:  localspec info Qwen/Qwen2.5-Coder-7B-Instruct-GGUF  ·  localspec info model.gguf --json"


def info_record(info, *, source: str, repo: str | None = None, commit: str | None = None,
                parts: int = 1, downloaded: bool = True) -> dict:
    tok = info.tokenizer
    return {
        "source": source, "repo": repo, "commit": commit, "downloaded": downloaded,
        "name": info.name, "architecture": info.architecture, "parameters": info.n_params,
        "size_label": info.size_label, "quant": info.quant, "file_bytes": info.file_bytes, "parts": parts,
        "n_layer": info.n_layer, "context_length": info.context_length, "n_embd": info.n_embd,
        "n_head": info.n_head, "n_head_kv": info.n_head_kv, "vocab_size": info.n_vocab,
        "tokenizer": None if tok is None else {
            "model": tok.model, "bos_id": tok.bos_id, "eos_id": tok.eos_id, "eot_id": tok.eot_id,
            "fingerprint": tok.fingerprint,
        },
        "chat_template": info.has_chat_template,
        "original": info.origin,
    }


@user_errors
def info(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_model),
    as_json: bool = typer.Option(False, "--json", help="Print the facts as JSON."),
    offline: Offline = False,
) -> None:
    from pathlib import Path

    from localspec.cli._models import quiet_hub_logs
    from localspec.resolve import Hub, check_gguf, looks_like_hub, parse_hub
    from localspec.resolve.gguf_info import read_info

    from localspec.settings import build, is_profile_name

    quiet_hub_logs()
    if is_profile_name(model):
        model = build(model, {}).model
    if looks_like_hub(model):
        ref = parse_hub(model)
        facts, choice, listing, local = Hub.from_env(offline=offline).inspect(ref)
        record = info_record(facts, source=f"{listing.repo}/{choice.parts[0].path}", repo=listing.repo,
                             commit=listing.commit, parts=len(choice.parts), downloaded=local)
    else:
        path = check_gguf(Path(model).expanduser())
        record = info_record(read_info(path), source=str(path))
    if as_json:
        sys.stdout.write(json.dumps(record, indent=2) + "\n")
        return
    table = Table(show_header=False, title=record["name"], title_style="bold")
    table.add_column(style="bold")
    table.add_column()
    tok = record["tokenizer"] or {}
    where = "in the cache" if record["downloaded"] else "read remotely, not downloaded"
    rows = [
        ("source", f"{record['source']} ({where})" if record["repo"] else record["source"]),
        ("architecture", record["architecture"]),
        ("parameters", f"{record['parameters'] / 1e9:.2f} B" + (f" ({record['size_label']})" if record["size_label"] else "")),
        ("quant", record["quant"] or "-"),
        ("file size", f"{record['file_bytes'] / 1e9:.2f} GB" + (f" in {record['parts']} parts" if record["parts"] > 1 else "")),
        ("layers", str(record["n_layer"])),
        ("context length", str(record["context_length"])),
        ("embedding / heads / KV heads", f"{record['n_embd']} / {record['n_head']} / {record['n_head_kv']}"),
        ("vocab", f"{record['vocab_size']} ({tok.get('model', '?')}), fingerprint {tok.get('fingerprint', '-')}"),
        ("BOS / EOS / EOT", f"{tok.get('bos_id')} / {tok.get('eos_id')} / {tok.get('eot_id')}"),
        ("chat template", "yes" if record["chat_template"] else "no"),
        ("original weights", record["original"] or "-"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    terminal.stdout_console().print(table)
