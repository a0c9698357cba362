"""A TCP proxy on loopback whose connections a test can cut, for links between processes.

A test puts it between two servers (one told to advertise the proxy's address) and calls
:meth:`Proxy.cut` to break every connection through it at both ends, as a network fault would,
while both servers keep running. Unlike killing sockets from outside (``ss -K``, which needs a
kernel built with ``CONFIG_INET_DIAG_DESTROY`` and ``CAP_NET_ADMIN``), it works on any machine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fanout.background import Background
from fanout.testing.ports import LOOPBACK

CHUNK = 65536


class Proxy:
    """Forwards each connection to its port to ``target`` (host, port) until cut."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.connections = 0  # accepted so far
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        """``host:port`` to advertise."""
        return f"{LOOPBACK}:{self.port}"

    def cut(self) -> int:
        """Abort both ends of every connection through the proxy; how many ends were open."""
        ends = list(self._open)
        for writer in ends:
            writer.transport.abort()
        self._open.clear()
        return len(ends)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            far_reader, far_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, far_writer}
        try:
            async with asyncio.TaskGroup() as pumping:
                pumps = [
                    pumping.create_task(self._pump(reader, far_writer)),
                    pumping.create_task(self._pump(far_reader, writer)),
                ]
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                for pump in pumps:  # one direction ended: the connection ends
                    pump.cancel()
        finally:
            for end in (writer, far_writer):
                end.transport.abort()
                self._open.discard(end)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):  # the other end went: the pump ends
            while data := await reader.read(CHUNK):
                writer.write(data)
                await writer.drain()


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
