"""``localspec chat``: a terminal chat over ``localspec.Conversation``.

On a terminal: line editing and history (prompt_toolkit), answers streamed as Markdown
(Rich). Without one on stdin: one message per line in, one answer per message out, so
scripts and tests can drive it. Slash commands work in both.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from localspec.cli._common import (
    MODEL_HELP,
    CtxSize,
    Draft,
    DraftGpuLayers,
    DraftMax,
    DraftMin,
    DraftPMin,
    FrequencyPenalty,
    GpuLayers,
    KvType,
    MaxTokens,
    MinP,
    NgramMax,
    NgramMin,
    Offline,
    PresencePenalty,
    RepeatPenalty,
    Seed,
    Spec,
    System,
    Temperature,
    Threads,
    TopK,
    TopP,
    Verbose,
    settings_from_context,
    user_errors,
    PromptCache,
    PromptCacheSize,
)
from localspec.cli.completion import complete_model
from localspec.defaults import DEFAULTS as D
from localspec.errors import LocalspecError
from localspec.outputs import terminal
from localspec.reply import ReplyParser, thinks
from localspec.types import MODES, FinishReason, Result

HELP = "Chat with a model in the terminal; the KV cache is reused from turn to turn."
EPILOG = (
    "Examples:  localspec chat qwen2.5-coder-1.5b  ·  localspec chat model.gguf --draft auto --show-draft  ·  "
    "printf 'Hi\\nAnd in French?\\n' | localspec chat model.gguf"
)
# What /set may change, and what /save keeps with the messages.
SETTABLE = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "draft_max")
SAVED = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
         "seed", "max_tokens", "spec", "draft_max", "draft_min", "draft_p_min", "ngram_min", "ngram_max")
COMMANDS = {
    "/help": "this list",
    "/system TEXT": "set the system prompt (empty: none)",
    "/reset": "forget the conversation",
    "/save NAME": "save the conversation, its settings and its KV state (NAME: a name, or a .json path)",
    "/load NAME": "load a saved conversation (chat --resume NAME does at start)",
    "/stats": "the last answer: tokens, speed, reused prompt, speculation",
    "/spec MODE": f"speculation: {', '.join(MODES)}",
    "/set KEY VALUE": f"change a setting: {', '.join(SETTABLE)}, show_draft (on/off)",
    "/model": "what is loaded",
    "/thinking": "the last answer's reasoning, unfolded",
    "/exit": "leave (Ctrl-D does too)",
}


@dataclass
class Chat:
    """The REPL's state: the conversation, the settings it follows, the output mode."""

    engine: Any
    settings: Any
    conversation: Any
    markdown: bool
    show_draft: bool
    stats: bool
    say_line: Callable[[str], None] = field(default=terminal.note)
    reasoning: str = ""  # the last answer's <think> block, folded when shown

    def apply(self, settings: Any) -> None:
        """Make ``settings`` the ones the next answers are generated with."""
        self.settings = settings
        self.conversation.sampling = settings.sampling()
        self.conversation.max_tokens = settings.max_tokens
        self.conversation.spec = settings.spec_config()

    def handle(self, line: str) -> bool:
        """A line typed: a slash command or a message; False when the chat should end."""
        if line.lstrip().startswith("/"):
            return self.command(line.strip())
        if line.strip():
            self.answer(line)
        return True

    # ------------------------------------------------------------------ one answer

    def answer(self, text: str) -> None:
        try:
            stream = self.conversation.say(text)
        except LocalspecError as exc:
            terminal.error(exc.message)
            return
        colour = self.show_draft and sys.stdout.isatty() and terminal.colour_allowed()
        render = _Markdown() if self.markdown and not self.show_draft else _Plain(colour)
        think = thinks(self.engine.model.chat_template)
        parser = ReplyParser(think=think, thinking=think and stream.opens_thinking)
        interrupted = False
        try:
            with render:
                for event in stream:
                    for part in parser.feed(event.text):
                        render.add(part.text, event.from_draft, part.kind == "reasoning")
                for part in parser.close():
                    render.add(part.text, False, part.kind == "reasoning")
        except KeyboardInterrupt:
            interrupted = True
        self.reasoning = render.reasoning
        if interrupted:
            self.conversation.cancel()  # what was generated stays, marked interrupted
        else:
            self.conversation.settle()
        result = self.conversation.last
        render.end()
        if interrupted:
            terminal.note("[interrupted]")
        elif result is not None and result.finish_reason is FinishReason.ERROR:
            terminal.error(result.error or "Generation failed.")
        if self.stats and result is not None:
            terminal.note(_brief(result))

    # ------------------------------------------------------------------ commands

    def command(self, line: str) -> bool:
        """Run a slash command; False when the chat should end."""
        name, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        handler = getattr(self, "_cmd_" + name[1:].lower(), None) if name[1:].isalpha() else None
        if handler is None:
            self.say_line(f"Unknown command {name}; /help lists them.")
            return True
        try:
            return handler(arg) is not False
        except LocalspecError as exc:
            self.say_line(exc.message)
            return True

    def _cmd_help(self, _arg: str) -> None:
        width = max(len(k) for k in COMMANDS)
        for key, text in COMMANDS.items():
            self.say_line(f"{key:<{width}}  {text}")
        self.say_line("Enter sends; Alt-Enter (or Esc, Enter) starts a new line; Ctrl-C stops an answer; "
                      "Ctrl-D leaves.")

    def _cmd_thinking(self, _arg: str) -> None:
        if not self.reasoning:
            self.say_line("The last answer has no reasoning.")
            return
        terminal.note(self.reasoning)

    def _cmd_exit(self, _arg: str) -> bool:
        return False

    _cmd_quit = _cmd_exit

    def _cmd_system(self, arg: str) -> None:
        self.conversation.system = arg or None
        self.say_line(f"System prompt set ({len(arg)} characters)." if arg else "System prompt removed.")

    def _cmd_reset(self, _arg: str) -> None:
        self.conversation.reset()
        self.say_line("Conversation cleared.")

    def _cmd_save(self, arg: str) -> None:
        from localspec.conversation import saved_path

        if not arg:
            raise LocalspecError("Usage: /save NAME")
        path = saved_path(arg)
        if path.parent != Path(".") and not path.parent.exists() and path.parent.name == "chats":
            path.parent.mkdir(parents=True, exist_ok=True)
        kept = self.conversation.save(path, {k: getattr(self.settings, k) for k in SAVED})
        also = f" (and its KV state, {kept} tokens)" if kept else ""
        self.say_line(f"Saved {len(self.conversation.turns)} messages to {arg}{also}.")

    def _cmd_load(self, arg: str, verb: str = "Loaded") -> None:
        from localspec.conversation import saved_path
        from localspec.settings import SettingError, updated

        if not arg:
            raise LocalspecError("Usage: /load NAME")
        saved = self.conversation.load(saved_path(arg))
        try:
            self.apply(updated(self.settings, {k: v for k, v in saved.items() if k in SAVED}, f"file {arg}"))
        except SettingError as exc:
            raise LocalspecError(f"{arg}: {exc.key} {exc.problem}.") from None
        self.say_line(f"{verb} {len(self.conversation.turns)} messages from {arg}.")

    def _cmd_stats(self, _arg: str) -> None:
        result = self.conversation.last
        if result is None:
            self.say_line("No answer yet.")
            return
        self.say_line(stats_text(result))

    def _cmd_spec(self, arg: str) -> None:
        mode = arg.lower()
        if mode not in MODES:
            raise LocalspecError(f"Usage: /spec {'|'.join(MODES)}")
        if mode == "draft" and self.engine.draft is None:
            raise LocalspecError("No draft model is loaded; start the chat with --draft MODEL (or --draft auto).")
        self._set({"spec": mode})
        self.say_line(f"Speculation: {mode}.")

    def _cmd_set(self, arg: str) -> None:
        key, _, value = arg.partition(" ")
        key, value = key.strip().lower().replace("-", "_"), value.strip()
        if key == "show_draft":
            if value.lower() not in ("on", "off"):
                raise LocalspecError("Usage: /set show_draft on|off")
            self.show_draft = value.lower() == "on"
            self.say_line(f"show_draft {value.lower()}.")
            return
        if key not in SETTABLE or not value:
            raise LocalspecError(f"Usage: /set KEY VALUE, KEY one of {', '.join(SETTABLE)}, show_draft.")
        self._set({key: None if value.lower() in ("none", "off") and key in ("max_tokens", "seed") else value})
        self.say_line(f"{key} = {getattr(self.settings, key)}.")

    def _set(self, values: dict[str, Any]) -> None:
        from localspec.settings import SettingError, updated

        try:
            self.apply(updated(self.settings, values, "flag"))
        except SettingError as exc:
            raise LocalspecError(f"{exc.key}: {exc.problem}.") from None

    def _cmd_model(self, _arg: str) -> None:
        e = self.engine
        draft = getattr(getattr(getattr(e, "draft", None), "model", None), "path", None)
        self.say_line(f"model {e.model.path} · context {e.n_ctx} tokens · threads {e.ctx.n_threads}"
                      f" · draft {draft or 'none'} · speculation {self.settings.spec}")


# ---------------------------------------------------------------------- rendering


def _folded(reasoning: str) -> str:
    return f"▸ thought for {len(reasoning.split())} words (/thinking unfolds it)"


class _Plain:
    """Text as it comes; tokens from accepted drafts in colour with --show-draft. The
    model's reasoning is not printed: one line says it was there (/thinking shows it)."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour
        self.last = "\n"
        self.reasoning = ""
        self.folded = False

    def __enter__(self) -> _Plain:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._fold()

    def add(self, text: str, from_draft: bool, reasoning: bool = False) -> None:
        if reasoning:
            self.reasoning += text
            return
        self._fold()
        if text:
            terminal.write_text(text, highlight=self.colour and from_draft)
            self.last = text

    def _fold(self) -> None:
        if self.reasoning.strip() and not self.folded:
            self.folded = True
            terminal.note(_folded(self.reasoning))

    def end(self) -> None:
        if not self.last.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()


class _Markdown:
    """The answer rendered as Markdown, redrawn as it grows (Rich Live); the model's
    reasoning dimmed while it thinks, folded to one line once the answer begins."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.text = ""
        self.reasoning = ""
        self.console = Console(highlight=False)
        self.live = Live(console=self.console, refresh_per_second=10, vertical_overflow="visible")

    def __enter__(self) -> _Markdown:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._draw(done=True)
        self.live.__exit__(None, None, None)

    def add(self, text: str, from_draft: bool, reasoning: bool = False) -> None:
        if reasoning:
            self.reasoning += text
        else:
            self.text += text
        self._draw()

    def _draw(self, done: bool = False) -> None:
        from rich.console import Group
        from rich.markdown import Markdown
        from rich.text import Text

        parts: list[Any] = []
        if self.reasoning.strip():
            folded = done or bool(self.text)
            parts.append(Text(_folded(self.reasoning) if folded else self.reasoning, style="dim"))
        parts.append(Markdown(self.text))
        self.live.update(Group(*parts), refresh=False)

    def end(self) -> None:
        sys.stdout.flush()


def _brief(result: Result) -> str:
    """The dim line after an answer with --stats."""
    t, spec = result.timings, result.spec
    drafted = f" · {spec.accepted} from drafts" if spec is not None and spec.accepted else ""
    return f"{result.usage.completion_tokens} tokens · {t.decode_tokens_per_s:.1f} tok/s{drafted}"


def stats_text(result: Result) -> str:
    """/stats: the last answer's tokens, speed, reused prompt and speculation."""
    t, u, spec = result.timings, result.usage, result.spec
    lines = [f"answer: {u.completion_tokens} tokens in {t.decode_s:.2f} s ({t.decode_tokens_per_s:.1f} tok/s), "
             f"finish {result.finish_reason.value}",
             f"prompt: {u.prompt_tokens} tokens, {u.cached_tokens} reused from the cache, "
             f"{u.prompt_tokens - u.cached_tokens} prefilled in {t.prompt_s:.2f} s"]
    if spec is None or spec.mode == "off" and not spec.drafted:
        lines.append("speculation: off")
    else:
        lines.append(f"speculation {spec.mode}: drafted {spec.drafted}, accepted {spec.accepted} "
                     f"({spec.acceptance_rate:.0%}), {spec.mean_accepted_per_step:.2f} accepted per step")
    return "\n".join(lines)


# ---------------------------------------------------------------------- input


def _history_file() -> Path:
    import platformdirs

    base = Path(os.environ.get("LOCALSPEC_DATA_DIR") or platformdirs.user_data_dir("localspec"))
    base.mkdir(parents=True, exist_ok=True)
    return base / "chat-history"


def _session() -> Any:
    """A prompt_toolkit session: Enter sends, Alt-Enter (Esc, Enter) and pastes keep newlines."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings

    keys = KeyBindings()

    @keys.add("enter")
    def _send(event: Any) -> None:
        event.current_buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    try:
        history: Any = FileHistory(str(_history_file()))
    except OSError:
        history = InMemoryHistory()
    return PromptSession(history=history, multiline=True, key_bindings=keys,
                         prompt_continuation=lambda width, *_: "." * (width - 1) + " ")


def _terminal_loop(chat: Chat) -> None:
    session = _session()
    chat.say_line("Type a message, /help for commands, Ctrl-D to leave.")
    while True:
        try:
            line = session.prompt(">>> ")
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line
            continue
        except EOFError:  # Ctrl-D at an empty prompt
            return
        if not chat.handle(line):
            return


def _line_loop(chat: Chat) -> None:
    """stdin is not a terminal: each line is a message (or a command); each answer is
    printed as it comes, then a newline."""
    for raw in sys.stdin:
        if not chat.handle(raw.rstrip("\n")):
            return


# ---------------------------------------------------------------------- the command


@user_errors
def chat(
    ctx: typer.Context,
    model: Optional[str] = typer.Argument(
        None, help=MODEL_HELP + " Default: the default profile if one is set, else the embedded SmolLM2-135M-Instruct.",
        autocompletion=complete_model,
    ),
    system: System = D["system"],
    max_tokens: MaxTokens = D["max_tokens"],
    temperature: Temperature = D["temperature"],
    top_k: TopK = D["top_k"],
    top_p: TopP = D["top_p"],
    min_p: MinP = D["min_p"],
    repeat_penalty: RepeatPenalty = D["repeat_penalty"],
    presence_penalty: PresencePenalty = D["presence_penalty"],
    frequency_penalty: FrequencyPenalty = D["frequency_penalty"],
    seed: Seed = D["seed"],
    ctx_size: CtxSize = D["ctx_size"],
    prompt_cache: PromptCache = D["prompt_cache"],
    prompt_cache_size: PromptCacheSize = D["prompt_cache_size"],
    threads: Threads = D["threads"],
    spec: Spec = D["spec"],
    draft: Draft = D["draft"],
    draft_max: DraftMax = D["draft_max"],
    draft_min: DraftMin = D["draft_min"],
    draft_p_min: DraftPMin = D["draft_p_min"],
    ngram_min: NgramMin = D["ngram_min"],
    ngram_max: NgramMax = D["ngram_max"],
    kv_type: KvType = D["kv_type"],
    gpu_layers: GpuLayers = D["gpu_layers"],
    draft_gpu_layers: DraftGpuLayers = D["draft_gpu_layers"],
    show_draft: bool = typer.Option(
        False, "--show-draft", help="Colour the tokens that came from accepted drafts (on a terminal)."),
    plain: bool = typer.Option(False, "--plain", help="Print answers as plain text, not Markdown."),
    stats: bool = typer.Option(False, "--stats", help="After each answer, a line with its speed and drafted tokens."),
    resume: Optional[str] = typer.Option(
        None, "--resume", metavar="NAME", help="Go on with a conversation kept with /save NAME (its KV state "
                                               "too: the history is not prefilled again)."),
    verbose: Verbose = False,
    offline: Offline = False,
) -> None:
    from localspec.cli._models import open_engine_for
    from localspec.conversation import Conversation

    s = settings_from_context(ctx, model)
    engine = open_engine_for(s, offline=offline, verbose=verbose)
    interactive = sys.stdin.isatty()
    markdown = not plain and sys.stdout.isatty() and terminal.colour_allowed()
    try:
        conversation = Conversation(engine, system=s.system, note=terminal.note)
        state = Chat(engine, s, conversation, markdown=markdown, show_draft=show_draft, stats=stats)
        state.apply(s)
        if resume is not None:
            state._cmd_load(resume, "Resumed")
        t0 = time.perf_counter()
        (_terminal_loop if interactive else _line_loop)(state)
        if verbose:
            terminal.note(f"chat ended after {time.perf_counter() - t0:.1f} s")
    finally:
        engine.close()
