"""Token bytes -> text that is safe to show now.

Two things make this more than ``bytes.decode``: a token can carry part of a UTF-8
character (byte-level vocabularies split emoji and CJK characters across tokens), and a
stop string can be split across tokens. So text is released only once it is complete and
cannot be the start of a stop string; the held-back tail is released at the end, or
dropped from the match on when a stop string completes.
"""

from __future__ import annotations

import codecs


class TextAssembler:
    def __init__(self, stop: list[str] | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in (stop or []) if s]
        self._held = ""
        self.text = ""  # everything released so far
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Feed a token's bytes; return the text that can be shown now. After a stop
        string completes, ``stopped`` is True and later pushes return nothing."""
        if self.stopped:
            return ""
        buf = self._held + self._decoder.decode(piece)
        if not self._stop:
            self._held = ""
            return self._release(buf)
        cut = min((i for i in (buf.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return self._release(buf[:cut])
        keep = self._partial_stop_len(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return self._release(buf[: len(buf) - keep])

    def finish(self) -> str:
        """Release whatever is held (generation ended without completing a stop string);
        a dangling partial UTF-8 sequence becomes U+FFFD."""
        if self.stopped:
            return ""
        rest = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return self._release(rest)

    def _partial_stop_len(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:n]):
                    best = n
                    break
        return best

    def _release(self, text: str) -> str:
        self.text += text
        return text
