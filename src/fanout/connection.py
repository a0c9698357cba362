"""A connection's outbound side: a bounded send queue drained by one writer task.

When the queue is full the peer is too slow for what it asked for: the connection is closed
(1008, "slow consumer") rather than buffering without bound or dropping frames that carry
deltas. Other threads (Spark's micro-batch callback) hand frames over with
``offer_threadsafe``. When nothing is queued or being written and the transport is not paused,
``offer`` writes the frame itself (why, and the websockets internals it relies on:
docs/architecture.md, "Inside the relay"); if the transport then pauses, the writer task waits
for it to drain before anything else goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.protocol import Side, State

from fanout.background import Background

log = logging.getLogger(__name__)

#: websockets' close code for a policy violation; the reason says which.
POLICY_VIOLATION = 1008
#: Queued after a frame written at once that the transport could not pass on whole: the writer
#: waits for the transport to drain before writing what follows.
_DRAIN = None


class Outbound:
    """Frames waiting to be written to one WebSocket, at most ``limit`` of them (a frame written
    at once that the transport is still draining counts as one), and ``control`` more if those
    are control frames.

    Control frames are the small answers and notices a relay sends a subscriber (``Subscribed``,
    ``Error``, ``NoUpdate``), as opposed to pushes and batches. They get room of their own so
    that a client which pipelines many requests, or whose many subscriptions all end at once (a
    split moving them), while a large push is still draining, is not taken for a slow consumer:
    their number is bounded by what it sent and what it holds, not by its reading.

    The connection's handler holds it open (``async with outbound:``) around its read loop: the
    block owns the writer task and the closing handshake ``close`` starts, and leaving it lets
    queued frames go out (``grace``) and waits for both.

    Attributes:
        sent: frames written so far.
        sent_bytes: bytes of those frames (WebSocket framing not counted).
        overflowed: whether the queue ever filled (the connection was then closed).
        closed_for: why ``close`` closed the connection, if it did.
    """

    def __init__(
        self,
        websocket: Connection,
        limit: int,
        on_idle: Callable[[], None] | None = None,
        control: int = 0,
        grace: float = 1.0,
    ) -> None:
        self._websocket = websocket
        self._limit = limit
        #: (frame, whether it is a control frame); ``_DRAIN`` alone.
        self._queue: asyncio.Queue[tuple[bytes, bool] | None] = asyncio.Queue(
            maxsize=limit + control
        )
        self._controls = 0  # control frames queued
        self._writing_since: float | None = None
        self._on_idle = on_idle
        self._loop = asyncio.get_running_loop()
        self.sent = 0
        self.sent_bytes = 0
        self.overflowed = False
        self.closed_for: str | None = None
        #: Seconds queued frames get to go out when the block ends.
        self.grace = grace
        #: The writer and the closing handshake, while the ``async with`` block is open.
        self._tasks = Background()
        self._open = False
        self._writer: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._drained = asyncio.Event()
        #: Whether ``offer`` may frame what it writes at once itself (``binary_frame``): a
        #: server's frames are not masked, and no extension was negotiated to transform them.
        protocol = websocket.protocol
        self._frames_itself = (
            protocol.side is Side.SERVER and not protocol.extensions and not protocol.debug
        )

    async def __aenter__(self) -> Outbound:
        """Start the writer task, in this object's ``Background``."""
        await self._tasks.__aenter__()
        self._writer = self._tasks.start(self._run())
        self._open = True
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Give queued frames up to ``grace`` seconds to go out, then stop the writer (and
        wait for a closing handshake ``close`` started: websockets bounds it)."""
        try:
            if not self.idle and self._websocket.state is not State.CLOSED:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._drained.wait(), self.grace)
            if self._writer is not None:
                self._writer.cancel()
        finally:
            self._open = False
            # The block's error stays the caller's: the group only waits for the writer and
            # the closing handshake.
            await self._tasks.__aexit__(None, None, None)
            # The cancelled writer's traceback holds its frame, which holds this object: with
            # the task kept here, the connection would wait for a full collection to be freed.
            self._writer = None

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being written: the connection is ready for more."""
        return self._writing_since is None and self._queue.empty()

    def stalled_for(self, now: float) -> float:
        """Seconds the frame being written has been waiting for the peer (0 if none)."""
        return 0.0 if self._writing_since is None else now - self._writing_since

    @property
    def pending(self) -> int:
        """Frames queued and not yet written."""
        return self._queue.qsize()

    def offer(self, data: bytes, control: bool = False) -> bool:
        """Queue a frame (a ``control`` frame: see the class); if there is no room for it,
        close the connection as a slow consumer.

        Returns:
            Whether the frame was queued.
        """
        if self.overflowed:
            return False
        if self.idle and self._write_now(data):
            return True
        queued = self._queue.qsize()
        if queued >= self._queue.maxsize or (
            not control and queued - self._controls >= self._limit
        ):
            self.overflowed = True
            self.close(f"slow consumer: {queued} frames waiting to be sent")
            return False
        self._queue.put_nowait((data, control))
        self._controls += control
        self._drained.clear()
        return True

    def _write_now(self, data: bytes, acked: Callable[[float], None] | None = None) -> bool:
        """Write ``data`` without the writer task, if the connection is open and not paused;
        with ``acked``, a probe's ping in the same write (``offer_probed``), if this object
        frames what it writes."""
        websocket = self._websocket
        if (
            websocket.protocol.state is not State.OPEN
            or websocket.send_in_progress is not None
            or _paused(websocket)
            or websocket.transport.is_closing()
        ):
            return False
        protocol = websocket.protocol
        if self._frames_itself and not protocol.writes and not protocol.expect_continuation_frame:
            if acked is None:
                websocket.transport.write(binary_frame(data))
            else:
                ping = _PING_HEADER + self._ping(acked)
                websocket.transport.write(binary_frame(data, ping))
        elif acked is not None:
            return False  # the frame and the ping go as ``offer`` and ``probe`` send them
        else:
            protocol.send_binary(data)
            websocket.send_data()
        self.sent += 1
        self.sent_bytes += len(data)
        if _paused(websocket):  # the kernel did not take it all: wait for the transport
            self._writing_since = self._loop.time()
            self._queue.put_nowait(_DRAIN)
            self._drained.clear()
        return True

    def offer_probed(self, data: bytes, acked: Callable[[float], None]) -> bool:
        """``offer(data)``, then ``probe(acked)``: when the frame is written at once, its
        probe's ping goes in the same write (a system call and a pass through the transport
        fewer: a relay probes each free link twice a second, ``relay.core.links``).

        Returns:
            Whether the probe was sent (not if the frame was refused, or on a closing
            connection).
        """
        if self.overflowed:
            return False
        if self.idle and self._write_now(data, acked):
            return True
        return self.offer(data) and self.probe(acked)

    def probe(self, acked: Callable[[float], None]) -> bool:
        """Ping the peer behind every byte written so far (``sent_bytes``); ``acked(at)`` with
        the loop's time once its pong came: they were all read (``relay.core.links``).

        Written at once, as websockets' ``ping`` would (its ``pending_pings``, which
        ``acknowledge_pings`` completes), without a task per ping.

        Returns:
            Whether it was sent (not on a connection that is closing).
        """
        websocket = self._websocket
        if websocket.protocol.state is not State.OPEN or websocket.transport.is_closing():
            return False
        protocol = websocket.protocol
        if self._frames_itself and not protocol.writes:  # framed here, as ``_write_now`` does
            websocket.transport.write(_PING_HEADER + self._ping(acked))
        else:
            protocol.send_ping(self._ping(acked))
            websocket.send_data()
        return True

    def _ping(self, acked: Callable[[float], None]) -> bytes:
        """A ping's data, registered with websockets (``pending_pings``, which its
        ``acknowledge_pings`` completes when the pong comes) to call ``acked``."""
        pings = self._websocket.pending_pings
        data = _PING_DATA(next(_pings) & 0xFFFFFFFF)  # unique among those in flight (a count)
        while data in pings:
            data = _PING_DATA(next(_pings) & 0xFFFFFFFF)
        pings[data] = (_Pong(acked, self._loop), self._loop.time())  # type: ignore[assignment]
        return data

    def close(self, reason: str) -> None:
        """Close the connection with a policy-violation code and ``reason`` (once: later calls,
        while the closing handshake runs, do nothing)."""
        if self.closed_for is not None:
            return
        log.warning("closing %s: %s", self._websocket.remote_address, reason)
        self.closed_for = reason
        if self._open:  # after the block the connection's handler is closing it already
            self._closing = self._tasks.start(self._websocket.close(POLICY_VIOLATION, reason))

    async def put(self, data: bytes) -> None:
        """Queue a frame, waiting for room: for a long, paced stream such as a replay."""
        if not self.overflowed:
            await self._queue.put((data, False))
            self._drained.clear()

    def offer_threadsafe(self, data: bytes) -> None:
        """``offer`` from a thread other than the event loop's."""
        self._loop.call_soon_threadsafe(self.offer, data)

    async def _run(self) -> None:
        """Write queued frames until the connection closes."""
        try:
            while True:
                queued = await self._queue.get()
                if queued is _DRAIN:
                    await self._websocket.drain()
                else:
                    data, control = queued
                    self._controls -= control
                    self._writing_since = self._loop.time()
                    await self._websocket.send(data)
                    self.sent += 1
                    self.sent_bytes += len(data)
                self._writing_since = None
                if self._queue.empty():
                    self._drained.set()
                    if self._on_idle is not None:
                        self._on_idle()
        except ConnectionClosed:
            return


async def refuse(websocket: Connection, reason: str) -> None:
    """Close ``websocket`` with a policy-violation code and ``reason``, discarding what the
    peer sent meanwhile.

    A handler that stops reading a peer which keeps sending leaves websockets' queue of
    received frames full; websockets then stops reading the socket, so the peer's closing
    frame, behind those frames, would not be read and the closing handshake would take its
    whole timeout (10 s), the connection held all along. Reading on while closing lets it end
    at once.
    """
    async with asyncio.TaskGroup() as closing:
        closing.create_task(websocket.close(POLICY_VIOLATION, close_reason(reason)))
        with contextlib.suppress(ConnectionClosed):
            async for _ in websocket:
                pass


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame's reason holds (123 bytes of UTF-8, RFC 6455 5.5)."""
    return text.encode()[:123].decode(errors="ignore")


def binary_frame(data: bytes, after: bytes = b"") -> bytes:
    """``data`` as one unmasked binary WebSocket frame (RFC 6455 section 5.2), as websockets'
    ``Frame.serialize`` writes it for a server without extensions; ``after`` (frames of its
    own) follows it in the same bytes.

    A relay writes thousands of pushes a second; websockets' protocol object builds a ``Frame``
    for each, checks it and serializes it, about 1 µs a frame. Here: two to ten header bytes.
    """
    size = len(data)
    if size < 126:
        header = bytes((0x82, size))
    elif size < 1 << 16:
        header = _HEADER_16(0x82, 126, size)
    else:
        header = _HEADER_64(0x82, 127, size)
    return b"".join((header, data, after)) if after else header + data


_HEADER_16 = struct.Struct("!BBH").pack
_HEADER_64 = struct.Struct("!BBQ").pack
#: A server's ping of 4 bytes of data (FIN, opcode 9; unmasked), and its data: a count, not
#: ``os.urandom`` (a system call each, which websockets makes for its own pings).
_PING_HEADER = b"\x89\x04"
_PING_DATA = struct.Struct("!I").pack
_pings = itertools.count()


class _Pong:
    """What a probe's ping waits on in websockets' ``pending_pings``, in place of its future:
    ``acknowledge_pings`` calls ``set_result`` when the pong comes, which calls ``acked`` with
    the loop's time at once (no future, and no callback scheduled, a ping); a connection that
    closes first (``terminate_pending_pings``: ``set_exception``, ``cancel``) acks nothing."""

    __slots__ = ("_acked", "_done", "_loop")

    def __init__(self, acked: Callable[[float], None], loop: asyncio.AbstractEventLoop) -> None:
        self._acked, self._loop, self._done = acked, loop, False

    def done(self) -> bool:
        return self._done

    def set_result(self, latency: float) -> None:
        self._done = True
        try:
            self._acked(self._loop.time())
        except Exception:  # a bug in the ack's bookkeeping: logged, as the loop logs a future's
            log.exception("a probe's ack failed")  # callback's; the connection reads on

    def set_exception(self, error: BaseException) -> None:
        self._done = True

    def cancel(self) -> bool:
        self._done = True
        return False


def _paused(websocket: Connection) -> bool:
    """Whether the transport holds more than its high-water mark (websockets' flow control)."""
    return websocket.paused


@contextlib.asynccontextmanager
async def dial(url: str, **options: Any) -> AsyncIterator[ClientConnection]:
    """Open a WebSocket to ``url`` (``websockets.asyncio.client.connect`` with ``options``).

    A server that breaks the opening handshake off (killed or restarting while it answers, or
    not a WebSocket server) is one that cannot be reached now, as one that refuses the TCP
    connection is: both raise ``ConnectionError``, so that a caller that reconnects (a relay's
    upstream link, a subscriber moving to the next relay) handles them alike.

    Raises:
        ConnectionError: the handshake failed (websockets' ``InvalidHandshake``, chained).
        OSError: the server cannot be reached (refused, unreachable; ``TimeoutError`` too).
    """
    try:
        websocket = await connect(url, **options)
    except InvalidHandshake as exc:
        raise ConnectionError(f"{url}: the opening handshake failed: {exc}") from exc
    async with websocket:
        yield websocket


async def greet(websocket: ClientConnection, hello: bytes, url: str) -> bytes | str:
    """Send our ``Hello`` and return the peer's first frame (its ``Welcome`` or ``Error``).

    A peer that closes the connection before answering (killed, restarting) cannot be reached
    now, as with :func:`dial`.

    Raises:
        ConnectionError: the connection closed before the answer (``ConnectionClosed``, chained).
    """
    try:
        await websocket.send(hello)
        answer = await websocket.recv()
    except ConnectionClosed as exc:
        raise ConnectionError(
            f"{url}: the connection closed before the handshake's answer"
        ) from exc
    return answer
