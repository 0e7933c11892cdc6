"""Shell completion: the scripts in completions/, and what a MODEL argument completes to."""

from __future__ import annotations

from pathlib import Path

PROG = "localspec"
COMPLETE_VAR = "_LOCALSPEC_COMPLETE"
FILES = {"bash": "localspec.bash", "zsh": "_localspec", "fish": "localspec.fish"}


def script(shell: str) -> str:
    """Typer's completion script for ``shell``: it asks ``localspec`` itself for the
    candidates, so it stays right as commands and options change."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell) + "\n"


def write_all(directory: Path) -> list[Path]:
    out = []
    for shell, name in FILES.items():
        path = directory / name
        path.write_text(script(shell))
        out.append(path)
    return out


def complete_model(incomplete: str) -> list[str]:
    """Profile names, cached Hub models (``repo:QUANT``) and .gguf files for a MODEL
    argument; never raises (a broken profile or cache just completes less)."""
    found: list[str] = []
    try:
        from localspec import profiles

        found += [p.name for p in profiles.available()]
    except Exception:
        pass
    try:
        from localspec.resolve.cache import cached_models

        found += [m.name for m in cached_models()]
    except Exception:
        pass
    try:
        base = Path(incomplete).expanduser().parent if "/" in incomplete else Path(".")
        prefix = "" if base == Path(".") else incomplete.rsplit("/", 1)[0] + "/"
        found += [prefix + p.name for p in base.glob("*.gguf")]
    except OSError:
        pass
    return sorted({f for f in found if f.startswith(incomplete)})


if __name__ == "__main__":  # python -m localspec.cli.completion: regenerate completions/
    for written in write_all(Path(__file__).resolve().parents[2] / "completions"):
        print(written)
