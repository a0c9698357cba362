"""Two connected ends in memory that carry WebSocket messages both ways, for whole
conversations in tests without sockets (the in-memory fake of STYLE.md's item 6).

``a, b = memory_pair()``: what ``a.send`` sends, ``b.recv`` receives, in order, and back. Each
end speaks the part of websockets' ``Connection`` fanout's peers use (``send``, ``recv``,
``async for``, ``close``, ``close_code``), so a peer runs against either.

1. Each direction holds at most ``limit`` unread messages; ``send`` then waits for the reader
   (``send_nowait`` raises ``asyncio.QueueFull``), as a socket's buffers push back.
2. ``close(code, reason)`` on either end closes both: what was sent before is still received,
   then ``recv`` and ``send`` raise ``ConnectionClosedOK`` (1000, 1001) or
   ``ConnectionClosedError``, and ``async for`` ends on the former.
3. ``sent`` and ``received`` count the messages that passed each end; ``pending`` the waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable

from websockets.exceptions import ConnectionClosed, ConnectionClosedError, ConnectionClosedOK
from websockets.frames import Close

#: Messages waiting unread in each direction when ``memory_pair`` is given no limit.
LIMIT = 64
#: Close codes of a normal closure (websockets raises ``ConnectionClosedOK`` for them).
NORMAL = (1000, 1001)

Message = bytes | str


class _Direction:
    """Messages one way: at most ``limit`` waiting, then the close after them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.messages: deque[Message] = deque()
        self.close: Close | None = None
        self._changed = asyncio.Event()

    async def until(self, ready: Callable[[], object]) -> None:
        """Wait until ``ready()`` holds; every change of this direction looks again."""
        while not ready():
            self._changed.clear()
            await self._changed.wait()

    def changed(self) -> None:
        self._changed.set()


class MemoryEnd:
    """One end of a link made by ``memory_pair``."""

    def __init__(self, name: str, inbox: _Direction, outbox: _Direction) -> None:
        self.name = name
        self._inbox = inbox
        self._outbox = outbox
        self._closed_here = False
        self.sent = 0
        self.received = 0

    def __repr__(self) -> str:
        return f"MemoryEnd({self.name!r}, sent={self.sent}, received={self.received})"

    @property
    def close_code(self) -> int | None:
        """The code the link was closed with; ``None`` while it is open."""
        return None if self._inbox.close is None else self._inbox.close.code

    @property
    def close_reason(self) -> str | None:
        """The reason the link was closed with; ``None`` while it is open."""
        return None if self._inbox.close is None else self._inbox.close.reason

    @property
    def pending(self) -> int:
        """Messages sent to this end and not received yet."""
        return len(self._inbox.messages)

    async def send(self, message: Message) -> None:
        """Send one message to the other end, waiting while its ``limit`` are unread.

        Raises:
            ConnectionClosed: the link is closed.
        """
        out = self._outbox
        await out.until(lambda: out.close is not None or len(out.messages) < out.limit)
        self.send_nowait(message)

    def send_nowait(self, message: Message) -> None:
        """Send one message without waiting.

        Raises:
            ConnectionClosed: the link is closed.
            asyncio.QueueFull: the other end has ``limit`` messages unread.
        """
        out = self._outbox
        if out.close is not None:
            raise self._closed()
        if len(out.messages) >= out.limit:
            raise asyncio.QueueFull
        out.messages.append(message)
        out.changed()
        self.sent += 1

    async def recv(self) -> Message:
        """The next message from the other end, waiting for one.

        Raises:
            ConnectionClosed: the link was closed and everything sent before was received.
        """
        inbox = self._inbox
        await inbox.until(lambda: inbox.messages or inbox.close is not None)
        if not inbox.messages:
            raise self._closed()
        inbox.changed()  # room for a waiting sender
        self.received += 1
        return inbox.messages.popleft()

    async def __aiter__(self) -> AsyncIterator[Message]:
        """Messages until the link is closed normally (any other closure raises)."""
        while True:
            try:
                yield await self.recv()
            except ConnectionClosedOK:
                return

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the link, both ends; a second close does nothing."""
        if self._inbox.close is not None:
            return
        self._closed_here = True
        for direction in (self._inbox, self._outbox):
            direction.close = Close(code, reason)
            direction.changed()

    def _closed(self) -> ConnectionClosed:
        close = self._inbox.close
        assert close is not None
        sent, rcvd = (close, None) if self._closed_here else (None, close)
        error = ConnectionClosedOK if close.code in NORMAL else ConnectionClosedError
        return error(rcvd, sent)


def memory_pair(
    limit: int = LIMIT, names: tuple[str, str] = ("a", "b")
) -> tuple[MemoryEnd, MemoryEnd]:
    """Two ends connected to each other, each direction holding at most ``limit`` unread
    messages."""
    to_a, to_b = _Direction(limit), _Direction(limit)
    return MemoryEnd(names[0], to_a, to_b), MemoryEnd(names[1], to_b, to_a)
