"""The asyncio shell of the relay's MQTT broker: sockets, time, and nothing else.

Each connection is read by its own task and its bytes handed to ``Broker.receive``; what comes
back is carried out here. A connection is a ``Link`` (TCP or TLS here, a WebSocket in
``mqtt.ws``): all go through ``serve``, so through one CONNECT path. What one turn of the event
loop sends a connection goes out as one write (``flush``). Reads are rate-limited per
connection, a slow consumer is closed past ``max_buffered``, a ``Persist`` holds back what
follows it until the session is written, an ``Authenticate`` is answered by
``mqtt.access.login`` (in a thread, failures limited per client address), and a ``Close``
lingers (``LINGER``) reading and dropping what the client still sends: ``docs/mqtt.md`` (How
it is built) says why each.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from fanout.buckets import Throttle
from fanout.mqtt.access import Access, LoginLimiter, login
from fanout.mqtt.actions import Action, Authenticate, Close, Persist, Published, Restore, Send
from fanout.mqtt.broker import Broker
from fanout.mqtt.introspection import Peer, Traffic

log = logging.getLogger(__name__)

READ_SIZE = 65536
#: Seconds a closed connection is still read (and dropped) for its client to close first.
LINGER = 2.0


class Link(Protocol):
    """One client's connection as the listener writes to it (TCP, or a WebSocket)."""

    def write(self, data: bytes) -> None:
        """Send ``data`` (in order, after what was written before)."""

    def buffered(self) -> int:
        """Bytes written and not yet sent."""

    def finish(self) -> None:
        """End the connection after what was written (the client is to close it now)."""

    def abort(self) -> None:
        """Drop the connection at once."""

    def address(self) -> str:
        """The client's address (its host), for the per-address login limit."""


class TcpLink:
    """A TCP (or TLS) connection's ``Link``."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.transport = writer.transport

    def address(self) -> str:
        return host(self.writer.get_extra_info("peername"))

    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def buffered(self) -> int:
        return self.transport.get_write_buffer_size()

    def finish(self) -> None:
        if self.writer.can_write_eof():  # not over TLS: there the client closes on DISCONNECT
            self.writer.write_eof()

    def abort(self) -> None:
        self.writer.transport.abort()


class Listener:
    """Serves MQTT clients on one port for ``broker``."""

    def __init__(
        self,
        broker: Broker,
        host: str,
        port: int,
        *,
        read_rate: float = 1000.0,
        read_burst: int = 1000,
        max_buffered: int = 8 << 20,
        on_published: Callable[[Published], None] | None = None,
        on_filters: Callable[[list[tuple[str, int]]], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """A listener for ``broker``; ``on_published`` hears every message clients publish,
        ``on_filters`` every subscription taken (+1) or dropped (-1); ``tls``: serve TLS."""
        self.broker = broker
        self.tls = tls
        self.host, self.port = host, port
        self.read_rate, self.read_burst, self.max_buffered = read_rate, read_burst, max_buffered
        self.on_published = on_published
        self.on_filters = on_filters
        #: Hears each ``Restore`` (a CONNECT waiting for its session from Redis): ``durable``.
        self.on_restore: Callable[[Restore], None] | None = None
        #: Writes a session to Redis for a ``Persist``: ``durable``.
        self.on_persist: Callable[[str], Awaitable[None]] | None = None
        #: Run alongside the listener (``fromlog``'s feed), ended with it.
        self.companions: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.slow_closed = 0
        #: What every connection moved, and each connection now (``mqtt.introspection``).
        self.traffic = Traffic()
        self.peers: dict[int, Peer] = {}
        self._links: dict[int, Link] = {}
        #: What each connection was sent in this turn of the event loop, written by ``flush``.
        self._out: dict[int, list[bytes]] = {}
        self._flushing: asyncio.Handle | None = None
        #: Connections closed and lingering (``LINGER``), with the timer that aborts them.
        self._finishing: dict[int, asyncio.TimerHandle] = {}
        self._ids = itertools.count(1)
        #: Connections whose output waits for a ``Persist``: what waits, and whether another
        #: ``Persist`` came meanwhile (the session is written once more before it goes).
        self._held: dict[int, list[Action]] = {}
        self._again: set[int] = set()
        #: Checks CONNECTs' credentials when set (``mqtt.setup``): ``broker.gated`` follows.
        self.access: Access | None = None
        self.logins = LoginLimiter()
        #: ``run``'s TaskGroup, which owns the session writes (``_persist``) and logins.
        self._tasks: asyncio.TaskGroup | None = None

    async def run(self, ready: Callable[[int], None] | None = None) -> None:
        """Serve until cancelled; ``ready(port)`` is called once listening."""
        server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.tls)
        async with server, asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            for companion in self.companions:
                tasks.create_task(companion())
            self.port = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready(self.port)
            try:
                while True:
                    await asyncio.sleep(1.0)
                    self.apply(self.broker.tick(time.monotonic()))
            finally:
                self._tasks = None
                for link in list(self._links.values()):
                    link.abort()

    def apply(self, actions: Iterable[Action]) -> None:
        """Carry out what the broker said: write, close, hand on published messages."""
        held, out = self._held, self._out
        for action in actions:
            if type(action) is Send and action.connection not in held:  # most of them
                pending = out.get(action.connection)
                if pending is not None:
                    pending.append(action.data)
                elif action.connection in self._links:
                    out[action.connection] = [action.data]
                    if self._flushing is None:
                        self._flushing = asyncio.get_running_loop().call_soon(self.flush)
            elif isinstance(action, Send | Close) and action.connection in held:
                held[action.connection].append(action)
            elif isinstance(action, Persist):
                self._persist(action)
            elif isinstance(action, Close):
                self._finish(action.connection)
            elif isinstance(action, Restore | Authenticate):
                self._parked(action)
            elif isinstance(action, Published):  # a Send went first, above
                self.traffic.messages_received += 1
                if self.on_published is not None:
                    self.on_published(action)
        changes = self.broker.take_filter_changes()  # taken always: the list is bounded
        if changes and self.on_filters is not None:
            self.on_filters(changes)

    def flush(self) -> None:
        """Write what each connection was sent since the last flush, as one write (one system
        call, where a write per packet made most of a fan-out's cost); called at the end of the
        event loop's turn that sent it, or after a full read (``READ_SIZE``: a publisher's burst,
        whose reads follow without a turn between them: its first messages go out meanwhile)."""
        self._flushing = None
        out = list(self._out.items())
        self._out.clear()  # the same dict: ``apply`` holds it
        for connection, data in out:
            self._put(connection, data)

    def _put(self, connection: int, data: list[bytes] | None) -> None:
        """Write ``data`` (packets, in order) to ``connection``, closed if it is too slow."""
        link = self._links.get(connection)
        if data is None or link is None or connection in self._finishing:
            return
        payload = data[0] if len(data) == 1 else b"".join(data)
        link.write(payload)
        self.traffic.sent(data, self.peers[connection].traffic, len(payload))
        if link.buffered() > self.max_buffered:
            self.slow_closed += 1
            log.info("mqtt connection %d closed: slow consumer", connection)
            link.abort()

    def _finish(self, connection: int) -> None:
        """Close ``connection`` after what was written; abort it ``LINGER`` seconds on."""
        link = self._links.get(connection)
        if link is None or connection in self._finishing:
            return
        self._put(connection, self._out.pop(connection, None))
        link.finish()
        self._finishing[connection] = asyncio.get_running_loop().call_later(LINGER, link.abort)

    def _persist(self, action: Persist) -> None:
        if self.on_persist is None:
            raise RuntimeError("the broker asked for a session write and nobody writes it")
        if action.connection in self._held:
            self._again.add(action.connection)
            return
        if self._tasks is None:  # stopping: as if the write failed (``_write``)
            log.warning("mqtt session %r not written: stopping; closed", action.client_id)
            self.apply([Close(action.connection, "session not written")])
            return
        self._held[action.connection] = []
        self._tasks.create_task(self._write(action, self.on_persist))

    async def _write(self, action: Persist, write: Callable[[str], Awaitable[None]]) -> None:
        """Write the session (again while more ``Persist`` came), then let its output go."""
        connection = action.connection
        try:
            while True:
                self._again.discard(connection)
                await write(action.client_id)
                if connection not in self._again:
                    break
        except Exception as error:  # Redis away: what the client was to get is not promised
            log.warning("mqtt session %r not written: %s; closed", action.client_id, error)
            self._held[connection] = [Close(connection, "session not written")]
        finally:
            self._again.discard(connection)
            self.apply(self._held.pop(connection, []))

    def _parked(self, action: Restore | Authenticate) -> None:
        """A CONNECT waits: for its session from Redis, or for its credentials' check."""
        if isinstance(action, Restore):
            if self.on_restore is None:
                raise RuntimeError("the broker parked a CONNECT and nobody restores it")
            self.on_restore(action)
        elif self.access is None:
            raise RuntimeError("the broker asked for a login check and nobody checks them")
        elif self._tasks is None:  # stopping
            self.apply([Close(action.connection, "stopping")])
        else:
            self._tasks.create_task(self._login(action, self.access))

    async def _login(self, action: Authenticate, access: Access) -> None:
        peer = self.peers.get(action.connection)
        address = "" if peer is None else peer.address
        verdict = await login(access, self.logins, action.connect, address)
        self.apply(self.broker.admitted(action.connection, verdict, time.monotonic()))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            transport = "tcp" if self.tls is None else "tls"
            await self.serve(TcpLink(writer), _chunks(reader), transport)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def serve(self, link: Link, chunks: AsyncIterator[bytes], transport: str = "tcp") -> None:
        """Serve one client's connection: ``chunks`` are its bytes as read, ``link`` its way
        back (over ``transport``, for the list of clients); returns when the connection ends
        (its will, if any, went out)."""
        connection = next(self._ids)
        self._links[connection] = link
        peer = self.peers[connection] = Peer(link.address(), time.time(), transport)
        throttle = Throttle(self.read_rate, self.read_burst) if self.read_rate > 0 else None
        self.broker.opened(connection, time.monotonic())
        try:
            async for data in chunks:
                if connection in self._finishing:
                    continue  # closed: read and dropped until the client closes (``LINGER``)
                before = self.broker.packets(connection)
                self.apply(self.broker.receive(connection, data, time.monotonic()))
                if len(data) >= READ_SIZE and self._flushing is not None:  # a burst: more waits
                    self._flushing.cancel()
                    self.flush()
                self.traffic.received(data)
                peer.traffic.received(data)
                if throttle is not None:
                    read = self.broker.packets(connection) - before
                    wait = throttle.take(time.monotonic(), read) if read else 0.0
                    if wait > 0:
                        await asyncio.sleep(wait)
        except (ConnectionError, OSError):
            pass  # the client went away: its will goes out below
        finally:
            self.apply(self.broker.lost(connection, time.monotonic()))
            del self._links[connection]
            del self.peers[connection]
            self._out.pop(connection, None)
            timer = self._finishing.pop(connection, None)
            if timer is not None:
                timer.cancel()


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """What ``reader`` reads, until the end of its stream."""
    while data := await reader.read(READ_SIZE):
        yield data


def host(peer: object) -> str:
    """The host of a transport's ``peername`` (an (address, port, ...) tuple, or a path)."""
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)
