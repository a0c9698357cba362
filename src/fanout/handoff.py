"""WebSocket connections on a port another server owns: upgrades handed over, led as serve() does.

The relay's port is h11's (``http.server``); it hands each WebSocket upgrade over with the bytes
it read. :class:`Handoff` makes a websockets ``Server`` wrap that port's listener and leads each
connection's life as ``websockets.asyncio.server.serve`` would: the opening handshake within a
timeout, keepalive pings if asked, the handler, the closing handshake. Subscribers' WebSockets
(``websocket.server``) and MQTT over WebSockets (``mqtt.ws``) both go through it, so the
websockets internals it relies on (the ``Server``'s ``all_connections``, ``handler_tasks`` and
``start_keepalive``) are in this one place: check them whenever websockets is upgraded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import Server, ServerConnection
from websockets.http11 import SERVER
from websockets.protocol import State
from websockets.server import ServerProtocol

log = logging.getLogger(__name__)


class Handoff:
    """Takes upgrades read by the port's own server and serves each with ``handler``."""

    def __init__(
        self,
        listener: Callable[[], asyncio.Server | None],
        handler: Callable[[ServerConnection], Awaitable[None]],
        *,
        open_timeout: float,
        keepalive: bool,
        what: str,
    ) -> None:
        """Args:
        listener: the port's listener, once it listens.
        handler: serves one connection once its opening handshake succeeded.
        open_timeout: seconds the opening handshake may take.
        keepalive: ping the client (websockets' ``ping_interval``) while it is served.
        what: what the connections are, for the log of a handler that failed.
        """
        self._listener = listener
        self._handler = handler
        self._open_timeout = open_timeout
        self._keepalive = keepalive
        self._what = what
        self._server: Server | None = None

    async def start(self) -> None:
        """Take upgrades from now on (the port listens)."""
        server = Server(self._port, self._lifecycle)
        await server  # it wraps the port's listener: closing it closes that too
        self._server = server

    async def stop(self) -> None:
        """Close the connections (1001) and wait for their handlers."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def take(
        self, transport: asyncio.Transport, head: bytes, protocol: ServerProtocol, **options: Any
    ) -> None:
        """An upgrade: a websockets connection (``options``: ``ServerConnection``'s) on
        ``transport`` reads the request from ``head`` (what the port read of it) and runs its
        handshake, then the handler. Aborted when not serving (not started yet, or stopping)."""
        if self._server is None or not self._server.is_serving():
            transport.abort()
            return
        connection = ServerConnection(protocol, self._server, **options)
        transport.set_protocol(connection)
        connection.connection_made(transport)  # starts ``_lifecycle`` under the server
        connection.data_received(head)

    async def _port(self) -> asyncio.Server:
        listener = self._listener()
        assert listener is not None, f"the port listens before {self._what} are taken on it"
        return listener

    async def _lifecycle(self, connection: ServerConnection) -> None:
        server = self._server
        assert server is not None
        try:
            async with asyncio.timeout(self._open_timeout):
                await connection.handshake(server_header=SERVER)
            if connection.protocol.state is not State.OPEN:
                connection.transport.abort()
                return
            # websockets keeps the handshake's request and response for handlers to read; none
            # of fanout's reads them, and their headers were a tenth of an idle subscriber's
            # memory (docs/benchmarks/submemory.md). The request stays, emptied: websockets
            # tells a handshake done by it.
            assert connection.request is not None
            connection.request.headers.clear()
            connection.response = None
            server.all_connections.add(connection)
            if self._keepalive:
                connection.start_keepalive()
            try:
                async with connection:
                    await self._handler(connection)
            except Exception:
                log.error("%s: a connection's handler failed", self._what, exc_info=True)
            finally:
                server.all_connections.discard(connection)
        except Exception:  # the opening handshake timed out, or failed unexpectedly
            connection.transport.abort()
        finally:
            task = asyncio.current_task()
            if task is not None:
                server.handler_tasks.discard(task)
