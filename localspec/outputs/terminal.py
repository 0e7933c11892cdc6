"""Rich output for humans: errors and statistics on stderr, honouring NO_COLOR."""

from __future__ import annotations

import os
import sys

from rich.console import Console

from localspec.types import Result, SpecStats

# stderr carries everything but the answer, so that `localspec run ... | next-tool` gets
# only the answer on its stdin. Rich honours NO_COLOR and drops styling off a terminal.
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console() -> Console:
    """For commands whose output is the rendering itself (plan, doctor)."""
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:  # a pipe or a file: no 80-column wrapping of tables
        console = Console(highlight=False, soft_wrap=False, width=140)
    return console


def error(message: str, detail: str | None = None, *, verbose: bool = False) -> None:
    stderr.print(f"[bold red]error:[/] {message}", markup=True)
    if verbose and detail:
        stderr.print(detail, markup=False, style="dim")


def note(message: str) -> None:
    stderr.print(message, style="dim", markup=False)


def stats_line(result: Result, load_s: float) -> str:
    t, u = result.timings, result.usage
    prompt_rate = (u.prompt_tokens - u.cached_tokens) / t.prompt_s if t.prompt_s > 0 else 0.0
    cached = f", {u.cached_tokens} cached" if u.cached_tokens else ""
    return (
        f"load {load_s:.2f} s · prompt {u.prompt_tokens} tokens{cached} in {t.prompt_s:.2f} s "
        f"({prompt_rate:.1f} tok/s) · generated {u.completion_tokens} tokens in "
        f"{t.decode_s:.2f} s ({t.decode_tokens_per_s:.1f} tok/s) · finish {result.finish_reason.value}"
    )


DRAFT_STYLE = "\x1b[36m"  # cyan: tokens that an accepted draft supplied
RESET = "\x1b[0m"


def colour_allowed() -> bool:
    return "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def write_text(text: str, *, highlight: bool = False) -> None:
    """Stream answer text to stdout as it comes."""
    if text:
        sys.stdout.write(f"{DRAFT_STYLE}{text}{RESET}" if highlight else text)
        sys.stdout.flush()


def spec_line(spec: SpecStats) -> str:
    if spec.mode == "off":
        return f"speculation: off ({spec.steps} steps without a draft that would pay)" if spec.steps else "speculation: off"
    lengths = " ".join(f"{k}:{n}" for k, n in spec.draft_lengths.items())
    return (
        f"speculation {spec.mode}: drafted {spec.drafted}, accepted {spec.accepted} "
        f"({spec.acceptance_rate:.0%}), {spec.mean_accepted_per_step:.2f} accepted per step over "
        f"{spec.steps} steps · draft lengths {lengths} · time draft {spec.draft_s:.2f} s, "
        f"verify {spec.verify_s:.2f} s, sampling {spec.sample_s:.2f} s"
    )
