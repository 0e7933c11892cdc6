"""``localspec doctor``: what this installation can do, and how to fix what it cannot."""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import typer

from localspec.cli._common import user_errors
from localspec.outputs import terminal

HELP = "Check the installation: versions, llama.cpp backends, devices, caches, the Hub."
EPILOG = "Examples:  localspec doctor  ·  localspec doctor --json"


def _dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += (Path(root) / f).stat().st_size
            except OSError:
                pass
    return total


def _hub_reachable(timeout: float = 3.0) -> bool:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
        return True
    except Exception:
        return False


@user_errors
def doctor(as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON.")) -> None:
    from huggingface_hub import constants

    from localspec import __version__
    from localspec.devices import backends as ggml_backends, detect
    from localspec.engine import backend
    from localspec.resolve.local import EMBEDDED_INSTALL, embedded_model
    from localspec.testmodels import cache_dir

    devices = detect()
    backends = ggml_backends()
    from localspec import profiles
    from localspec.errors import ProfileError
    from localspec.resolve.hub import default_cache_dir

    hf_cache = default_cache_dir()
    try:
        profile_names, profile_problem = [p.name for p in profiles.available()], None
        default_profile = profiles.default_profile()
    except ProfileError as exc:
        profile_names, profile_problem, default_profile = [], exc.message, None
    report = {
        "localspec": __version__,
        "python": sys.version.split()[0],
        "llama_cpp_python": backend.llama_cpp_version(),
        "llama_cpp_system_info": backend.system_info(),
        "backends": backends,
        "gpu_offload": backend.supports_gpu_offload(),
        "devices": [{"name": d.name, "kind": d.kind, "free_bytes": d.free_bytes, "total_bytes": d.total_bytes} for d in devices],
        "embedded_model": str(embedded_model()) if embedded_model() else None,
        "hf_cache": str(hf_cache),
        "hf_cache_bytes": _dir_size(hf_cache) if hf_cache.exists() else 0,
        "test_model_cache": str(cache_dir()),
        "config_dir": str(profiles.config_dir()),
        "profiles": profile_names,
        "default_profile": default_profile,
        "hf_token": bool(os.environ.get("HF_TOKEN") or (Path(constants.HF_TOKEN_PATH).is_file())),
        "hub_reachable": _hub_reachable(),
    }
    problems = []
    if not report["gpu_offload"]:
        problems.append(
            "llama.cpp was built for the CPU only; for an NVIDIA GPU rebuild with "
            "LOCALSPEC_CMAKE_ARGS=\"-DGGML_CUDA=on\" scripts/install.sh --rebuild, on a Mac with "
            "-DGGML_METAL=on."
        )
    if "AMX_INT8 = 1" in report["llama_cpp_system_info"]:
        problems.append("this build uses AMX, which crashes on some virtual machines; rebuild with scripts/install.sh --rebuild.")
    if report["embedded_model"] is None:
        problems.append(f"the default model is not installed: {EMBEDDED_INSTALL}")
    if profile_problem:
        problems.append(f"a profile does not validate: {profile_problem}")
    if not report["hub_reachable"]:
        problems.append(
            "the Hugging Face Hub cannot be reached (offline, HF_HUB_OFFLINE=1, or a firewall); "
            "local .gguf files still work, and HF_ENDPOINT points to a mirror."
        )
    report["problems"] = problems
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    out = terminal.stdout_console()
    gib = 1 << 30
    out.print(f"localspec {report['localspec']} · Python {report['python']} · llama-cpp-python {report['llama_cpp_python']}")
    out.print(f"llama.cpp backends: {', '.join(backends)} · GPU offload: {'yes' if report['gpu_offload'] else 'no'}")
    out.print(f"llama.cpp system info: {report['llama_cpp_system_info']}")
    for d in devices:
        out.print(f"device: {d.name} ({d.kind}) · {d.free_bytes / gib:.1f} GiB free of {d.total_bytes / gib:.1f} GiB")
    out.print(f"default model: {report['embedded_model'] or 'not installed'}"
              + (f" · default profile: {default_profile}" if default_profile else ""))
    out.print(f"profiles: {', '.join(profile_names) or 'none'}")
    out.print(f"Hugging Face cache: {report['hf_cache']} ({report['hf_cache_bytes'] / gib:.2f} GiB)")
    out.print(f"config dir: {report['config_dir']}")
    out.print(f"Hub reachable: {'yes' if report['hub_reachable'] else 'no'} · "
              f"Hub token: {'set' if report['hf_token'] else 'none (gated and private repos need HF_TOKEN or `hf auth login`)'}")
    for p in problems:
        out.print(f"[yellow]fix:[/] {p}", markup=True)
    if not problems:
        out.print("no problems found")
