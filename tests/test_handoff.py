"""WebSocket upgrades handed over by another server's port (handoff.py)."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection
from websockets.server import ServerProtocol

from fanout.handoff import Handoff
from fanout.testing.ports import LOOPBACK


class _Port(asyncio.Protocol):
    """The port's own server, as http.server is: reads an upgrade's head, hands it over."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff, self.head = handoff, b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.head += data
        if b"\r\n\r\n" in self.head:
            assert isinstance(self.transport, asyncio.Transport)
            self.handoff.take(self.transport, self.head, ServerProtocol())


async def test_a_handed_over_connection_is_served_without_its_handshake_kept() -> None:
    kept: list[object] = []

    async def echo(connection: ServerConnection) -> None:
        assert connection.request is not None
        kept.extend([len(connection.request.headers), connection.response])
        async for message in connection:
            await connection.send(message)

    listener: list[asyncio.Server] = []
    handoff = Handoff(
        lambda: listener[0], echo, open_timeout=5.0, keepalive=False, what="test connections"
    )
    loop = asyncio.get_running_loop()
    listener.append(await loop.create_server(lambda: _Port(handoff), LOOPBACK, 0))
    await handoff.start()
    try:
        port = listener[0].sockets[0].getsockname()[1]
        async with connect(f"ws://{LOOPBACK}:{port}") as client:
            await client.send("hello")
            assert await client.recv() == "hello"
        # What websockets keeps of the opening handshake is dropped once it succeeded: the
        # headers were a tenth of an idle subscriber's memory (docs/benchmarks/submemory.md).
        assert kept == [0, None]
    finally:
        await handoff.stop()
