"""The relay's WebSocket subscriber server: a front end (``relay.api.FrontEnd``) on the relay's
port, one handler per connection feeding its frames to the relay.

A connection is read at most ``Limits.read_rate`` frames a second after a first ``read_burst``
(``relay.core.throttle``), and all connections' frames together may take ``control_share`` of
the event loop: one flooding the relay is slowed by not being read. One that sends no ``Hello``
within ``hello_timeout`` seconds is refused and closed; beyond ``max_connections``, a new one's
``Hello`` is refused with ``unavailable``. A relay below (``Hello{role: "relay"}``) is handed
to the tiers front end once greeted.

The port is the HTTP front end's (``http.server``): it reads each request with h11 and hands a
WebSocket upgrade here (``take``), with the bytes it read, to a websockets connection on the same
transport, whose lifecycle is the one ``websockets.asyncio.server.serve`` gives
(``fanout.handoff``): stopping closes the connections with 1001 and waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.server import ServerProtocol

from fanout import expiry
from fanout.buckets import Throttle
from fanout.connection import Outbound, refuse
from fanout.handoff import Handoff
from fanout.relay.api import RelayApi
from fanout.relay.config import RelayConfig
from fanout.relay.core.rules import visible
from fanout.wire import codec
from fanout.wire.handshake import AcceptingSession
from fanout.wire.messages import Error, Hello, Publish, Subscribe, Unsubscribe

#: Largest frame accepted from a subscriber (subscriptions are small); a larger one closes
#: the connection (1009).
MAX_FROM_SUBSCRIBER = 1 << 20
#: Frames received from a subscriber and not yet read that websockets holds before it stops
#: reading the socket (its ``max_queue``): with ``MAX_FROM_SUBSCRIBER``, what one connection
#: can make the relay hold of what it sent is about 5 MiB, however it misbehaves.
MAX_QUEUED_FROM_SUBSCRIBER = 4

log = logging.getLogger(__name__)

#: Serves a relay below once greeted (``tiers.link.Tiers.serve``); returns why to close it.
Below = Callable[[int, ServerConnection, Hello], Awaitable[str | None]]


class WebSocketServer:
    """WebSocket subscribers (and relays below) on the relay's port."""

    def __init__(
        self, config: RelayConfig, below: Below, listener: Callable[[], asyncio.Server | None]
    ) -> None:
        """Args:
        config: the relay's configuration.
        below: serves a relay below once greeted (``tiers.link.Tiers.serve``).
        listener: the relay's port's listener (``http.server.HttpFrontEnd``), once it listens.
        """
        self._config = config
        self._below = below
        self._listener = listener
        self._relay: RelayApi | None = None
        self._handoff = Handoff(
            listener,
            self._serve,
            open_timeout=config.limits.hello_timeout,
            keepalive=True,
            what="WebSocket subscribers",
        )
        #: The time acting on subscribers' frames may take, all connections together.
        self._control = Throttle(config.limits.control_share, config.limits.control_burst)
        self.reads_throttled = 0
        self.frames_refused = 0
        self.frames_received = 0
        self.closed_bad = 0
        self.hello_timeouts = 0

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Take the port's WebSocket upgrades from now on (the HTTP front end listens)."""
        self._relay = relay
        await self._handoff.start()

    async def stop(self) -> None:
        """Close the connections (1001) and wait for their handlers."""
        await self._handoff.stop()

    def take(self, transport: asyncio.Transport, head: bytes) -> None:
        """A WebSocket upgrade on the relay's port (``fanout.handoff``): the opening handshake
        within ``hello_timeout``, keepalive pings, then ``_serve``."""
        self._handoff.take(
            transport,
            head,
            ServerProtocol(max_size=MAX_FROM_SUBSCRIBER),  # no compression: no extension
            max_queue=MAX_QUEUED_FROM_SUBSCRIBER,
            # Paused as soon as the kernel leaves bytes in the transport: a connection is idle
            # (may take the next push) only when it has written everything. asyncio's TLS
            # transport pauses at ``>=`` its high-water mark where the plain one pauses at
            # ``>``: 0 would pause it when empty and never resume.
            write_limit=0 if self._config.listening.tls_cert is None else 1,
        )

    def counts(self) -> dict[str, int]:
        """What ``GET /metrics`` shows of the subscribers' frames (``relay.shell.samples``)."""
        return {
            "reads_throttled": self.reads_throttled,
            "frames_refused": self.frames_refused,
            "frames_received": self.frames_received,
            "closed_bad": self.closed_bad,
            "hello_timeouts": self.hello_timeouts,
        }

    async def _serve(self, websocket: ServerConnection) -> None:
        relay = self._relay
        assert relay is not None, "started before it serves"
        limits = self._config.limits
        session = AcceptingSession(
            codec.to_relay(),
            f"fanout-relay {self._config.name}",
            relay.roles,
            room=relay.room,
            datasets=lambda grant: visible(relay.datasets(), grant),  # not session's: a cycle
            authenticate=(
                (lambda hello: relay.authenticate(hello.token, hello.role))
                if relay.authenticating
                else None
            ),
        )
        outbound = Outbound(
            websocket,
            limits.queue_limit,
            on_idle=lambda: relay.writable(client),
            control=limits.max_subscriptions + limits.read_burst,  # its subscriptions' notices
        )
        client = relay.open(outbound)
        throttle = Throttle(limits.read_rate, limits.read_burst) if limits.read_rate > 0 else None
        refused: str | None = None  # why the relay closes the connection, if it does
        connected = False
        try:
            async with outbound:  # leaving it, its last frames go out
                try:
                    async with asyncio.timeout(limits.hello_timeout) as handshake:
                        async for message in websocket:
                            started = time.perf_counter()  # decoding a frame is control time too
                            self.frames_received += 1
                            outcome = session.receive(message)
                            if outcome.reply is not None:
                                self._count_refusal(outcome.reply, outcome.close)
                                outbound.offer(codec.encode(outcome.reply), control=True)
                            if outcome.close:
                                refused = getattr(outcome.reply, "message", "closing")
                                break
                            if session.hello is not None and not connected:
                                connected = True
                                handshake.reschedule(expiry.deadline(session.grant))
                                relay.connect(client, session.grant, session.hello.capabilities)
                                if session.hello.role == "relay":  # a relay below: tiers
                                    refused = await self._below(client, websocket, session.hello)
                                    break
                            await self._take(relay, client, outcome.deliver, throttle, started)
                except TimeoutError:
                    if connected:  # after the hello: its token expired
                        refused = expiry.EXPIRED
                        outbound.offer(codec.encode(expiry.expired()))
                    else:
                        self.hello_timeouts += 1
                        refused = f"no hello within {limits.hello_timeout:g} s; closing"
                        outbound.offer(codec.encode(Error(code="handshake", message=refused)))
                except ConnectionClosed as closed:
                    # The subscriber went away (its subscriptions end below), or sent a frame over
                    # max_size, which websockets refuses by closing with 1009.
                    too_big = (
                        closed.sent is not None and closed.sent.code == CloseCode.MESSAGE_TOO_BIG
                    )
                    self.closed_bad += too_big
                finally:
                    relay.close(client)
        finally:
            relay.closed(outbound)
            if refused is not None:
                await refuse(websocket, refused)

    def _count_refusal(self, reply: object, close: bool) -> None:
        """Count a refusal of what a connection sent (not one for want of room)."""
        if isinstance(reply, Error) and reply.code != "unavailable":
            self.frames_refused += 1
            self.closed_bad += close

    async def _take(
        self,
        relay: RelayApi,
        client: int,
        frame: object,
        throttle: Throttle | None,
        started: float,
    ) -> None:
        """Hand a subscriber's frame (decoded from ``started``, ``time.perf_counter``) to the
        relay, then pause reading if its throttle or the relay's control time says so
        (``relay.core.throttle``)."""
        match frame:
            case Subscribe() as request:
                relay.subscribe(client, request)
            case Unsubscribe() as request:
                relay.unsubscribe(client, request)
            case Publish() as request:
                relay.write(client, request)
        relay.wake()
        now = asyncio.get_running_loop().time()
        # At most a second at a time: a connection overdrawn by many others is read again
        # within a second, one frame at a time, and a relay stopping does not wait for it.
        wait = min(self._control.take(now, time.perf_counter() - started), 1.0)
        if throttle is not None:
            wait = max(wait, throttle.take(now))
        if wait > 0:
            self.reads_throttled += 1
            await asyncio.sleep(wait)
