"""A conversation held in the library: the history, the system prompt and the settings
each answer is generated with. Front ends (``localspec chat``, Python code) are thin
shells over it.

Each turn renders the whole history with the model's chat template; the engine reuses
the slot's cached prefix (the earlier turns and answers), so only the new turn is
prefilled. When the history no longer fits the context, the oldest turns are dropped
(never the system prompt) with a notice, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from localspec.errors import InvalidRequest, LocalspecError, PromptTooLong
from localspec.types import FinishReason, Message, Request, Result, SamplingParams, SpecConfig

FORMAT = "localspec.conversation/1"
# Room kept for the answer when max_tokens is not set: a quarter of the context, at most
# 1024 tokens (an answer that needs more runs into the context's end and stops there).
ANSWER_ROOM = (4, 1024)


@dataclass
class Turn:
    """One message of the history; ``interrupted``: an answer stopped before its end."""

    role: str
    content: str
    interrupted: bool = False


@dataclass
class Conversation:
    """``say(text)`` submits the next turn and returns its stream; the answer joins the
    history when the stream has ended (read it, ``wait()`` it, or cancel it: a cancelled
    answer is kept, marked interrupted)."""

    engine: Any
    system: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    spec: SpecConfig | str | None = None
    max_tokens: int | None = None
    note: Callable[[str], None] = lambda _message: None
    turns: list[Turn] = field(default_factory=list)
    last: Result | None = None  # the last answer's result, once it has ended
    _pending: Any = None

    def say(self, text: str) -> Any:
        """Submit ``text`` as the user's next turn; the answer streams from the result."""
        self.settle()
        if not text.strip():
            raise InvalidRequest("The message is empty.")
        self.turns.append(Turn("user", text))
        try:
            request = self._fitted_request()
            self._pending = self.engine.submit(request)
        except LocalspecError:
            self.turns.pop()
            raise
        return self._pending

    def settle(self) -> Result | None:
        """Wait for the answer under way (if any) and add it to the history."""
        stream, self._pending = self._pending, None
        if stream is None:
            return None
        result = stream.wait()
        self.last = result
        if result.finish_reason is FinishReason.ERROR:
            self.turns.pop()  # the question goes too: the history stays a dialogue
        else:
            self.turns.append(Turn("assistant", result.text, result.finish_reason is FinishReason.CANCELLED))
        return result

    def reset(self) -> None:
        """Forget the history (the system prompt and the settings stay)."""
        self.cancel()
        self.turns.clear()
        self.last = None

    def cancel(self) -> None:
        """Stop the answer under way; what it generated stays, marked interrupted."""
        if self._pending is not None:
            self._pending.cancel()
            self.settle()

    def messages(self) -> list[Message]:
        """What the model sees: the system prompt and the turns."""
        system = [Message("system", self.system)] if self.system else []
        return system + [Message(t.role, t.content) for t in self.turns]

    def _request(self) -> Request:
        return Request(messages=self.messages(), sampling=self.sampling, max_tokens=self.max_tokens, spec=self.spec)

    def _fitted_request(self) -> Request:
        """The request for the history, dropping the oldest exchanges until the prompt
        leaves room for the answer; the newest turn alone must fit (if it does not, the
        history is left as it was)."""
        n_ctx = self.engine.n_ctx
        room = self.max_tokens or min(n_ctx // ANSWER_ROOM[0], ANSWER_ROOM[1])
        turns, self.turns = self.turns, self.turns[:]
        try:
            while True:
                request = self._request()
                try:
                    tokens, _ = self.engine.prepare(request)
                    if len(tokens) + room <= n_ctx or len(self.turns) == 1:
                        break
                except PromptTooLong:
                    if len(self.turns) == 1:
                        raise
                cut = next((i for i, t in enumerate(self.turns[1:], 1) if t.role == "user"), len(self.turns) - 1)
                del self.turns[:cut]
        except LocalspecError:
            self.turns = turns
            raise
        dropped = len(turns) - len(self.turns)
        if dropped:
            self.note(f"The conversation outgrew the context ({n_ctx} tokens): dropped the oldest "
                      f"{dropped} message{'s' if dropped != 1 else ''}.")
        return request

    # ------------------------------------------------------------ saving and loading

    def to_json(self, settings: dict[str, Any] | None = None) -> dict[str, Any]:
        self.settle()
        return {"format": FORMAT, "system": self.system, "messages": [_turn_json(t) for t in self.turns],
                "sampling": asdict(self.sampling), "max_tokens": self.max_tokens,
                "spec": self.spec if isinstance(self.spec, str) or self.spec is None else asdict(self.spec),
                "settings": settings or {}}

    def save(self, path: str | Path, settings: dict[str, Any] | None = None) -> int:
        """Write the history and settings to ``path``, and keep the history's KV state in
        the engine's prompt cache, so that loading it later prefills only what follows.
        Returns the tokens of state kept (0: none, the cache being off or the history short)."""
        data = json.dumps(self.to_json(settings), ensure_ascii=False, indent=2)
        try:
            Path(path).expanduser().write_text(data + "\n", encoding="utf-8")
        except OSError as exc:
            raise LocalspecError(f"Cannot write {path}: {exc.strerror}.") from None
        keep = getattr(self.engine, "keep_state", None)
        if keep is None or not self.turns:
            return 0
        try:
            return keep(self._request())
        except LocalspecError:
            return 0

    def load(self, path: str | Path) -> dict[str, Any]:
        """Replace the history, system prompt and settings with those saved in ``path``;
        returns the saved front-end settings."""
        try:
            data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        except OSError as exc:
            raise LocalspecError(f"Cannot read {path}: {exc.strerror}.") from None
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise LocalspecError(f"{path} is not a saved conversation (not JSON).") from None
        try:
            if data.get("format") != FORMAT:
                raise ValueError
            turns = [Turn(str(m["role"]), str(m["content"]), bool(m.get("interrupted", False)))
                     for m in data["messages"]]
            if any(t.role not in ("user", "assistant") for t in turns):
                raise ValueError
            sampling = replace(SamplingParams(), **data.get("sampling", {}))
            spec = data.get("spec")
            spec = SpecConfig(**spec) if isinstance(spec, dict) else spec
            max_tokens = data.get("max_tokens")
        except (AttributeError, KeyError, TypeError, ValueError):
            raise LocalspecError(f"{path} is not a saved conversation ({FORMAT}).") from None
        self.cancel()
        self.turns, self.system, self.sampling, self.spec, self.max_tokens = (
            turns, data.get("system"), sampling, spec, max_tokens)
        self.last = None
        return dict(data.get("settings") or {})


def saved_path(name: str) -> Path:
    """Where ``/save NAME`` and ``chat --resume NAME`` keep a conversation: a bare name
    (no folder, no .json) is a file in the user's data folder, anything else a path."""
    import os

    if "/" in name or os.sep in name or name.endswith(".json") or name.startswith((".", "~")):
        return Path(name).expanduser()
    import platformdirs

    base = Path(os.environ.get("LOCALSPEC_DATA_DIR") or platformdirs.user_data_dir("localspec"))
    return base / "chats" / f"{name}.json"


def _turn_json(turn: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"role": turn.role, "content": turn.content}
    if turn.interrupted:
        out["interrupted"] = True
    return out
