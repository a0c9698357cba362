"""MQTT over WebSockets on a worker's share of the relay's port, carried to its leader.

MQTT sessions live on the leader (one per client id, whichever worker a client's connection
lands on), so a worker serves none of an MQTT upgrade (``http.server``: path ``/mqtt`` or the
subprotocol ``mqtt``): it connects to the leader's loopback port, writes what it read of the
request, and from then on copies bytes both ways; TLS ends at the worker. Each side's flow
control holds the other (a side that cannot write pauses reading from the one that writes), and
either side closing closes both. The leader sees such clients as from loopback (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class Carried(asyncio.Protocol):
    """One side of a carried connection: what it reads is written to ``other``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        #: The other side's transport, once both are connected.
        self.other: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.other is not None, "read before the other side connected"
        self.other.write(data)

    def eof_received(self) -> bool:
        return False  # closes this side; connection_lost closes the other

    def pause_writing(self) -> None:
        if self.other is not None:
            self.other.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and not self.other.is_closing():
            self.other.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.other is not None:
            self.other.close()


class Carrier:
    """Carries upgrades taken on a worker's share of the relay's port to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._where = host, port
        self._connecting: set[asyncio.Task[None]] = set()
        #: Connections carried so far, and those that could not reach the leader.
        self.carried = self.failed = 0

    def take(self, transport: asyncio.Transport, head: bytes) -> None:
        """Carry ``transport``, ``head`` read of it so far (``http.server.Upgrade``)."""
        client = Carried()
        transport.set_protocol(client)
        client.connection_made(transport)
        transport.pause_reading()  # until the leader's side can take what it reads
        task = asyncio.get_running_loop().create_task(self._connect(client, head))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self, client: Carried, head: bytes) -> None:
        transport = client.transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        try:
            theirs, leader = await loop.create_connection(Carried, *self._where)
        except OSError as exc:  # the leader is gone: this worker ends with it (PDEATHSIG)
            self.failed += 1
            log.error(
                "MQTT over WebSockets not carried to the leader at %s:%d: %s", *self._where, exc
            )
            transport.close()
            return
        if transport.is_closing():  # the client left meanwhile
            theirs.close()
            return
        self.carried += 1
        leader.other, client.other = transport, theirs
        theirs.write(head)
        transport.resume_reading()
