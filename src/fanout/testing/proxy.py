"""A TCP proxy on loopback for links between processes: cut, partitioned, slowed and healed.

A test puts it between two processes (or a process and its service: the publisher, Redis, NATS,
PostgreSQL), the client told to dial the proxy, and then breaks the link while both ends live:

- ``cut()`` aborts both ends of every connection (what a reset or a dead middlebox does);
- ``partition(way)`` stops bytes one way or both, as dropped packets do: TCP holds what was
  sent, so bytes are held, not lost, and flow again on ``heal()`` unless an end gave up first
  (its keepalive or timeout closes the connection; that is the fault under test). Connections
  opened meanwhile are accepted and then hang, as a connect to an unreachable host does;
- ``slow(delay, rate)`` adds latency and a bandwidth limit (bytes/s) to each chunk one way or both;
- ``isolate(pid, way)`` partitions only the connections process ``pid`` opened (now or later):
  one relay loses a service every client dials at the same address (a Redis Cluster's nodes).

Unlike ``iptables`` it needs no privileges (``docs/architecture.md``, Partitions in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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
        #: Per connection (its near end): the client's port, and its own gates up and down.
        self._gates: dict[asyncio.StreamWriter, tuple[int, asyncio.Event, asyncio.Event]] = {}
        self._isolated: dict[int, Way] = {}  # pid -> the way its connections are partitioned

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

    def isolate(self, pid: int, way: Way = "both") -> None:
        """Partition ``way`` only the connections process ``pid`` opened through the proxy,
        those open now and those it opens until ``heal``."""
        self._isolated[pid] = way
        for near, (port, up, down) in self._gates.items():
            if near in self._open and _opened_by(pid, port, self.port):
                self._close_gates(way, up, down)

    def heal(self, way: Way = "both") -> None:
        """Undo ``partition``, ``isolate`` and ``slow``, ``way``: held bytes flow on at once."""
        for direction in self._ways(way):
            direction.delay, direction.bandwidth = 0.0, None
            direction.flowing.set()
        self._isolated.clear()
        for _, up, down in self._gates.values():
            up.set()
            down.set()

    @staticmethod
    def _close_gates(way: Way, up: asyncio.Event, down: asyncio.Event) -> None:
        if way in ("up", "both"):
            up.clear()
        if way in ("down", "both"):
            down.clear()

    def _ways(self, way: Way) -> tuple[Direction, ...]:
        return {"up": (self.up,), "down": (self.down,), "both": (self.up, self.down)}[way]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        port = writer.get_extra_info("peername")[1]
        up, down = asyncio.Event(), asyncio.Event()
        up.set()
        down.set()
        self._gates[writer] = (port, up, down)
        for pid, way in self._isolated.items():
            if _opened_by(pid, port, self.port):
                self._close_gates(way, up, down)
        try:
            # A partitioned link reaches nothing: the connect waits as a SYN would.
            await self.up.flowing.wait()
            await up.wait()
            try:
                far_reader, far_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._open.add(far_writer)
            try:
                await self._both_ways((reader, writer), (far_reader, far_writer), (up, down))
            finally:
                far_writer.transport.abort()
                self._open.discard(far_writer)
        finally:
            writer.transport.abort()
            self._open.discard(writer)
            del self._gates[writer]

    async def _both_ways(
        self,
        near: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        far: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        gates: tuple[asyncio.Event, asyncio.Event],
    ) -> None:
        """Pump both ways until one way ends (an end closed or was cut): the connection ends."""
        async with asyncio.TaskGroup() as pumping:
            pumps = [
                pumping.create_task(_pump(near[0], far[1], self.up, gates[0])),
                pumping.create_task(_pump(far[0], near[1], self.down, gates[1])),
            ]
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in pumps:
                pump.cancel()


def _opened_by(pid: int, port: int, proxy_port: int) -> bool:
    """Whether process ``pid`` holds the loopback socket from ``port`` to ``proxy_port`` (its
    inode in ``/proc/net/tcp*``, among the process's open files)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, remote = (int(end.rsplit(":", 1)[1], 16) for end in fields[1:3])
                if (local, remote) == (port, proxy_port):
                    inodes.add(f"socket:[{fields[9]}]")
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return True
    return False


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: Direction, gate: asyncio.Event
) -> None:
    """Copy one way: each chunk read is due ``delay`` after it came, waits while the way (or
    this connection's ``gate``) is partitioned, and is paced to ``rate``. Reading goes on
    meanwhile (latency, not a stall of the sender), up to what the held chunks' queue takes."""
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
                    await gate.wait()
                    wait = due - time.monotonic() if way.delay else 0.0
                    if wait > 0:
                        await asyncio.sleep(wait)
                    while not (way.flowing.is_set() and gate.is_set()):  # partitioned meanwhile
                        await way.flowing.wait()
                        await gate.wait()
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
