"""MQTT over WebSockets on the relay's port (MQTT 5.0 section 6; 3.1.1 section 6).

The HTTP front end hands over each upgrade that asks for the subprotocol ``mqtt`` or the path
``/mqtt`` (``http.server``); a websockets connection on its transport runs the opening
handshake, then its binary messages are the MQTT bytes, served by the listener as a TCP
connection's are (``Listener.serve``: one CONNECT path, one broker). Packets need not follow
message boundaries [MQTT-6.0.0-2]; a text message closes the connection [MQTT-6.0.0-1]; what it
reads ahead and queues is bounded. ``docs/mqtt.md`` (How it is built) has the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, NegotiationError
from websockets.frames import CloseCode
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from fanout.handoff import Handoff
from fanout.mqtt.listener import READ_SIZE, Listener, host

log = logging.getLogger(__name__)

#: Messages read ahead of the broker per connection (websockets' ``max_queue``).
MAX_QUEUE = 4
SUBPROTOCOL = Subprotocol("mqtt")


class WebSocketLink:
    """A WebSocket connection as the listener writes to it (``listener.Link``): what the
    broker sends waits here, counted, until ``send`` writes it as one binary message."""

    def __init__(self, connection: ServerConnection) -> None:
        self.connection = connection
        self._waiting: deque[bytes] = deque()
        self._bytes = 0
        self._more = asyncio.Event()
        self._finished = False

    def write(self, data: bytes) -> None:
        if not self._finished:
            self._waiting.append(data)
            self._bytes += len(data)
            self._more.set()

    def buffered(self) -> int:
        return self._bytes + self.connection.transport.get_write_buffer_size()

    def finish(self) -> None:
        self._finished = True  # ``send`` closes the connection (1000) after what waits
        self._more.set()

    def abort(self) -> None:
        self.connection.transport.abort()

    def address(self) -> str:
        return host(self.connection.transport.get_extra_info("peername"))

    async def send(self) -> None:
        """Write what waits, one message a turn (rule 1), until ``finish``; then close."""
        while True:
            await self._more.wait()
            self._more.clear()
            if self._waiting:
                data = b"".join(self._waiting)
                self._waiting.clear()
                await self.connection.send(data)
                self._bytes -= len(data)
            if self._finished:
                await self.connection.close()
                return


class MqttWebSockets:
    """MQTT clients over WebSockets on the relay's port, served by ``listener``."""

    def __init__(
        self,
        listener: Listener,
        port: Callable[[], asyncio.Server | None],
        *,
        open_timeout: float,
        tls: bool,
    ) -> None:
        """Args:
        listener: the MQTT listener whose broker serves them.
        port: the relay's port's listener (``http.server.HttpFrontEnd``), once it listens.
        open_timeout: seconds the opening handshake may take.
        tls: whether the port serves TLS (asyncio's TLS transport pauses differently).
        """
        self.listener = listener
        self._tls = tls
        self._handoff = Handoff(
            port, self._serve, open_timeout=open_timeout, keepalive=False, what="MQTT WebSockets"
        )
        self.text_refused = 0

    async def start(self) -> None:
        """Take upgrades from now on (the relay's port listens)."""
        await self._handoff.start()

    async def stop(self) -> None:
        """Close the connections (1001) and wait for them."""
        await self._handoff.stop()

    def take(self, transport: asyncio.Transport, head: bytes) -> None:
        """An upgrade for MQTT (``fanout.handoff``): the opening handshake, then ``_serve``."""
        protocol = ServerProtocol(
            subprotocols=[SUBPROTOCOL],
            select_subprotocol=_select,
            max_size=self.listener.broker.limits.max_packet + READ_SIZE,
        )
        self._handoff.take(
            transport, head, protocol, max_queue=MAX_QUEUE, write_limit=1 if self._tls else 0
        )

    async def _serve(self, connection: ServerConnection) -> None:
        link = WebSocketLink(connection)
        async with asyncio.TaskGroup() as tasks:
            sender = tasks.create_task(_sending(link))
            await self.listener.serve(link, self._messages(connection), transport="websocket")
            sender.cancel()

    async def _messages(self, connection: ServerConnection) -> AsyncIterator[bytes]:
        """The binary messages' bytes until the connection closes (rule 2: a text one ends it)."""
        try:
            async for message in connection:
                if isinstance(message, str):
                    self.text_refused += 1
                    await connection.close(CloseCode.UNSUPPORTED_DATA, "MQTT is sent in binary")
                    return
                yield message
        except ConnectionClosed:
            return


async def _sending(link: WebSocketLink) -> None:
    with contextlib.suppress(ConnectionClosed):  # the client went away: ``serve`` ends too
        await link.send()


def _select(protocol: ServerProtocol, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    """``mqtt`` if the client offers it; none if it offers none (it asked for ``/mqtt``).

    Raises:
        NegotiationError: it offers only others (websockets answers 400).
    """
    if not offered:
        return None
    if SUBPROTOCOL in offered:
        return SUBPROTOCOL
    raise NegotiationError(f"MQTT over WebSockets speaks {SUBPROTOCOL!r}, not {list(offered)}")
