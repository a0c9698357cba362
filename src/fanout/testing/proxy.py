"""A TCP proxy on loopback for links between processes: cut, partitioned, slowed and healed.

A test puts it between two processes (or a process and its service: the publisher, Redis, NATS,
PostgreSQL), the client told to dial the proxy, and then breaks the link while both ends live:

- ``cut()`` aborts both ends of every connection (what a reset or a dead middlebox does);
- ``partition(way)`` stops bytes one way or both, as dropped packets do: TCP holds what was
  sent, so bytes are held, not lost, and flow again on ``heal()`` unless an end gave up first
  (its keepalive or timeout closes the connection; that is the fault under test). Connections
  opened meanwhile are accepted and then hang, as a connect to an unreachable host does;
- ``slow(delay, rate)`` adds latency and a bandwidth limit (bytes/s) to each chunk one way or both.

Unlike ``iptables`` or ``ss -K`` it needs no privileges or kernel options
(``docs/architecture.md``, Partitions in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from fanout.background import Background
from fanout.testing.ports import LOOPBACK

CHUNK = 65536
#: ``up``: client to target; ``down``: target to client; ``both``.
Way = Literal["up", "down", "both"]


@dataclass
class Direction:
    """One way of the link: whether bytes flow, and what slows them."""

    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    delay: float = 0.0  #: seconds added to each chunk
    bandwidth: float | None = None  #: bytes per second at most (None: unlimited)
    waiting: int = 0  #: bytes read and not yet written (held by a partition or a delay)

    def __post_init__(self) -> None:
        self.flowing.set()


class Proxy:
    """Forwards each connection to its port to ``target`` (host, port)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.connections = 0  # accepted so far
        self.up, self.down = Direction(), Direction()
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        """``host:port`` to advertise."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def waiting(self) -> int:
        """Bytes the proxy holds now, both ways (sent by one end, not yet given to the other)."""
        return self.up.waiting + self.down.waiting

    def cut(self) -> int:
        """Abort both ends of every connection through the proxy; how many ends were open."""
        ends = list(self._open)
        for writer in ends:
            writer.transport.abort()
        self._open.clear()
        return len(ends)

    def partition(self, way: Way = "both") -> None:
        """Stop bytes ``way`` (new connections hang) until ``heal``."""
        for direction in self._ways(way):
            direction.flowing.clear()

    def slow(self, delay: float = 0.0, rate: float | None = None, way: Way = "both") -> None:
        """Add ``delay`` seconds to each chunk and limit it to ``rate`` bytes/s, ``way``."""
        if delay < 0 or (rate is not None and rate <= 0):
            raise ValueError(f"delay must be >= 0 and rate > 0, got {delay}, {rate}")
        for direction in self._ways(way):
            direction.delay, direction.bandwidth = delay, rate

    def heal(self, way: Way = "both") -> None:
        """Undo ``partition`` and ``slow``, ``way``: held bytes flow on at once."""
        for direction in self._ways(way):
            direction.delay, direction.bandwidth = 0.0, None
            direction.flowing.set()

    def _ways(self, way: Way) -> tuple[Direction, ...]:
        return {"up": (self.up,), "down": (self.down,), "both": (self.up, self.down)}[way]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        try:
            # A partitioned link reaches nothing: the connect waits as a SYN would.
            await self.up.flowing.wait()
            try:
                far_reader, far_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._open.add(far_writer)
            try:
                await self._both_ways((reader, writer), (far_reader, far_writer))
            finally:
                far_writer.transport.abort()
                self._open.discard(far_writer)
        finally:
            writer.transport.abort()
            self._open.discard(writer)

    async def _both_ways(
        self,
        near: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        far: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        """Pump both ways until one way ends (an end closed or was cut): the connection ends."""
        async with asyncio.TaskGroup() as pumping:
            pumps = [
                pumping.create_task(_pump(near[0], far[1], self.up)),
                pumping.create_task(_pump(far[0], near[1], self.down)),
            ]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pumps:
                pump.cancel()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: Direction) -> None:
    """Copy one way: each chunk read is due ``delay`` after it came, waits while the way is
    partitioned, and is paced to ``rate``. Reading goes on meanwhile (latency, not a stall of
    the sender), up to what the held chunks' queue takes."""
    chunks: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(maxsize=64)

    async def read() -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(CHUNK):
                way.waiting += len(data)
                await chunks.put((time.monotonic() + way.delay, data))
        await chunks.put(None)

    async def write() -> None:
        with contextlib.suppress(ConnectionError):
            while (chunk := await chunks.get()) is not None:
                due, data = chunk
                try:
                    await way.flowing.wait()
                    wait = due - time.monotonic() if way.delay else 0.0
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await way.flowing.wait()  # partitioned while it waited
                    writer.write(data)
                finally:
                    way.waiting -= len(data)  # written, or gone with a cut connection
                await writer.drain()
                if way.bandwidth is not None:
                    await asyncio.sleep(len(data) / way.bandwidth)

    try:
        async with asyncio.TaskGroup() as both:
            reading = both.create_task(read())
            await both.create_task(write())
            reading.cancel()  # the writing end went: the pump ends
    finally:
        while not chunks.empty():  # what a cut connection held is gone with it
            if (chunk := chunks.get_nowait()) is not None:
                way.waiting -= len(chunk[1])


@contextlib.asynccontextmanager
async def proxy(target: tuple[str, int]) -> AsyncIterator[Proxy]:
    """A :class:`Proxy` to ``target`` listening on a free loopback port, for the block."""
    running = Proxy(target)
    async with Background() as connections:

        def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.start(running._serve(reader, writer))

        server = await asyncio.start_server(serve, LOOPBACK, 0)
        running.port = server.sockets[0].getsockname()[1]
        try:
            async with server:
                yield running
        finally:
            running.cut()
            connections.cancel()
