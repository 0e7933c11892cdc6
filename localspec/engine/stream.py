"""A request's events, for synchronous and asynchronous consumers.

The engine thread hands events to a stream through ``_put`` and ``_end`` only. A
consumer iterates it with ``for`` (a thread blocks on a queue) or ``async for`` (the
first ``async for`` binds the stream to the running event loop: events then arrive
through ``loop.call_soon_threadsafe`` into an ``asyncio.Queue``, with no thread blocked
per stream). Either side may ``cancel()``; the engine frees the slot at its next step.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from localspec.types import Result, TokenEvent


class Stream:
    """The events of one request. Iterate it for ``TokenEvent``s (``for`` or ``async
    for``); afterwards ``result`` says how it ended; ``wait()`` or ``await stream`` runs
    it to the end and returns the ``Result``. ``cancel()`` may be called from any thread."""

    def __init__(self, wake: Callable[[], None], prompt_tokens: int, template: str | None,
                 opens_thinking: bool = False) -> None:
        self._wake = wake
        self._q: queue.SimpleQueue[TokenEvent | Result] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aq: asyncio.Queue[TokenEvent | Result] | None = None
        self._cancelled = threading.Event()
        self.prompt_tokens = prompt_tokens
        self.template = template
        self.opens_thinking = opens_thinking  # the prompt ends inside a <think> block
        self.result: Result | None = None

    # ------------------------------------------------------------ the engine's side

    def _put(self, item: TokenEvent | Result) -> None:
        with self._lock:
            loop, aq = self._loop, self._aq
            if loop is None:
                self._q.put(item)
                return
        try:
            loop.call_soon_threadsafe(aq.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening
            pass

    def _end(self, result: Result) -> None:
        self._put(result)

    # ------------------------------------------------------------ the consumer's side

    def __iter__(self) -> Iterator[TokenEvent]:
        if self.result is None and self._loop is not None:
            raise RuntimeError("This stream is consumed with async for.")
        while self.result is None:
            item = self._q.get()
            if isinstance(item, Result):
                self.result = item
                self._q.put(item)  # for any other consumer still waiting
                return
            yield item

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[TokenEvent]:
        if self.result is not None:
            return
        aq = self._bind()
        while self.result is None:
            item = await aq.get()
            if isinstance(item, Result):
                self.result = item
                aq.put_nowait(item)  # for any other consumer still waiting
                return
            yield item

    def _bind(self) -> asyncio.Queue[TokenEvent | Result]:
        """Move to the running event loop: what arrived so far first, then the rest."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is None:
                self._aq = asyncio.Queue()
                while True:
                    try:
                        self._aq.put_nowait(self._q.get_nowait())
                    except queue.Empty:
                        break
                self._loop = loop
            elif self._loop is not loop:
                raise RuntimeError("This stream is bound to another event loop.")
            return self._aq

    def __await__(self) -> Any:
        return self._drain().__await__()

    async def _drain(self) -> Result:
        async for _ in self:
            pass
        assert self.result is not None
        return self.result

    def wait(self) -> Result:
        """Consume the stream to its end and return the Result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def cancel(self) -> None:
        self._cancelled.set()
        self._wake()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()
