"""What a worker carries to its leader: MQTT over WebSockets, and the ``GET``s the relay answers
as a whole.

MQTT sessions live on the leader (one per client id, whichever worker a client's connection
lands on), so a worker serves none of an MQTT upgrade (``http.server``: path ``/mqtt`` or the
subprotocol ``mqtt``): it connects to the leader's loopback port, writes what it read of the
request, and from then on copies bytes both ways; TLS ends at the worker. Each side's flow
control holds the other (a side that cannot write pauses reading from the one that writes), and
either side closing closes both. The leader sees such clients as from loopback (docs/deploy.md).
``asked``: a ``GET`` whose answer is the relay's, not one worker's (``/metrics``, the rows held
in ``/v1/datasets``, the admin API, the MQTT broker's pages), is asked of the leader with the
request's token, and answered as it was.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from email.message import Message

from fanout.http.answers import Answer

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


#: Headers of the leader's answer not passed on: hop by hop, or the front end's own.
DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "server"})


async def asked(base: str, target: str, headers: Mapping[str, str]) -> Answer:
    """``GET target`` of the leader at ``base`` (``http://127.0.0.1:PORT``) with the request's
    ``Authorization`` (the leader checks the token as the worker would), answered as it was."""
    return await asyncio.to_thread(_get, base + target, headers.get("authorization"))


def _get(url: str, authorization: str | None) -> Answer:
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=5.0) as got:
            return _answer(got.status, got.headers, got.read())
    except urllib.error.HTTPError as refused:  # the leader's refusal is the answer
        with refused:
            return _answer(refused.code, refused.headers, refused.read())


def _answer(status: int, headers: Message, body: bytes) -> Answer:
    kept = [(name, value) for name, value in headers.items() if name.lower() not in DROPPED]
    # the relay's port closes the connection after a whole answer, and says so
    closing = [("Content-Length", str(len(body))), ("Connection", "close")]
    return Answer(status, [*kept, *closing], body)
