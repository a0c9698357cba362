"""The relay's asyncio shell: sockets, timers and tasks around ``RelayCore``.

Tasks (one ``TaskGroup`` owns them all):

* the subscriber server: one handler per connection, feeding frames to the core;
* the upstream link (``relay.shell.upstreamlink``): connects to the publisher, reconnects with
  backoff, hands batches to the writer (``relay.shell.writer``);
* the pump (``relay.shell.pump``): hands out due pushes in rounds of a bounded time;
* housekeeping (``relay.shell.pump``): releases spare primitives and disconnects subscribers that
  stopped reading.

Connections, WebSocket and HTTP streams alike, are counted in ``relay.shell.clients``.

A subscriber connection is read at most ``RelayConfig.limits.read_rate`` frames a second after
a first ``read_burst`` (``relay.core.throttle``): one that floods the relay with view changes is
slowed down, by not being read, rather than taking the event loop from everyone else. A
connection that sends no ``Hello`` within ``hello_timeout`` seconds is refused and closed; beyond
``max_connections`` served at once, a new one's ``Hello`` is refused with ``unavailable`` (the
`fanout subscribe` given several relays tries the next).

A subscriber's write (``Publish``, e.g. ``fanout mount``'s to an objects dataset) is forwarded
to the publisher over the upstream link and its answer sent back under the subscriber's ``req``;
while there is no publisher connection, or too many writes wait for answers, it is refused
``unavailable`` (``relay.core.forwarding``).

An HTTP ``GET /metrics`` on the subscriber port is answered with the relay's counters
(``relay.shell.samples``, ``fanout.metrics``) instead of a WebSocket handshake; ``GET /healthz`` and
``GET /readyz`` are the probes of a load balancer (ready: connected upstream, with room).

A relay without its publisher (starting, or the publisher restarting) keeps accepting
subscribers: a subscription to a dataset it does not know yet is held until the catalog comes
(``relay.core.holding``), then taken, or refused with ``unavailable`` after 30 s.

Slow consumers: a subscriber is only pushed to when its connection has written everything
before, so its queue holds at most one push (plus small control frames) and a slow reader gets
fewer, larger deltas — latest-value coalescing, counted per subscription. One that leaves a
push unread for ``stall_timeout`` seconds is closed (code 1008, reason ``slow consumer: ...``);
one whose queue still fills up (``queue_limit`` frames; its control frames — answers,
subscriptions' ends — have room for ``max_subscriptions + read_burst`` more, so that a client
pipelining requests behind a draining push is not taken for slow) is closed the same way. Neither
ever delays another subscriber: nothing waits on a slow connection but its own writer task.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterable

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout import expiry, metrics, tls
from fanout.auth import Grant, Verifier
from fanout.buckets import Throttle
from fanout.cluster.membership import Membership
from fanout.cluster.registry import Registry
from fanout.cluster.splitting import Balancer
from fanout.connection import Outbound, refuse
from fanout.http.server import HttpSubscription, connection_type, routes
from fanout.mqtt.federation import Cluster
from fanout.mqtt.listener import Listener
from fanout.mqtt.producer import ProducerLink
from fanout.mqtt.setup import mqtt_parts
from fanout.relay.config import RelayConfig
from fanout.relay.core.admission import Redirect, Refuse, Serve, admit, admit_write, roles
from fanout.relay.core.every import EVERY_BURST
from fanout.relay.core.forwarding import Forwarder
from fanout.relay.core.holding import Holding
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.core.rules import visible
from fanout.relay.data.tables import TableStore
from fanout.relay.kernels.compiled import COMPILED
from fanout.relay.shell.clients import Clients
from fanout.relay.shell.pump import Pump
from fanout.relay.shell.samples import relay_samples
from fanout.relay.shell.upstreamlink import UpstreamLink
from fanout.tiers.below import Relays
from fanout.tiers.link import serve_below
from fanout.wire import codec
from fanout.wire.handshake import AcceptingSession
from fanout.wire.messages import (
    DatasetInfo,
    Error,
    Hello,
    Publish,
    Published,
    Subscribe,
    Unsubscribe,
)

log = logging.getLogger(__name__)

#: Largest frame accepted from a subscriber (subscriptions are small); a larger one closes
#: the connection (1009).
MAX_FROM_SUBSCRIBER = 1 << 20
#: Frames received from a subscriber and not yet read that websockets holds before it stops
#: reading the socket (its ``max_queue``): with ``MAX_FROM_SUBSCRIBER``, what one connection
#: can make the relay hold of what it sent is about 5 MiB, however it misbehaves.
MAX_QUEUED_FROM_SUBSCRIBER = 4


class RelayServer:
    """One relay process's event loop side."""

    def __init__(self, config: RelayConfig) -> None:
        """A relay that will run as ``config`` (checked when it was made) says."""
        self.config = config
        self.core = RelayCore(
            config.policy,
            config.planning.aging,
            engine=TableStore(config.limits.query_timeout),
            max_subscriptions=config.limits.max_subscriptions,
            sql_share=config.limits.sql_share,
            sql_burst=config.limits.sql_burst,
            holding=Holding(config.limits.catalog_wait, config.limits.max_held),
            # A burst goes out while the connection drains: half its queue at most.
            every_burst=max(1, min(EVERY_BURST, config.limits.queue_limit // 2)),
        )
        self.port: int | None = None
        self.clients = Clients(self.core, config.limits.max_connections)
        #: subscribers' writes forwarded to the publisher, awaiting its answers
        self._forwarder = Forwarder()
        self._wake = asyncio.Event()
        #: One thread writes batches to inert buffers, in order; the pump swaps them in.
        #: Relays below this one (``tiers``): batches are forwarded to them as written.
        self.relays = Relays(self.core, max_primitives=config.limits.max_subscriptions)
        self._roles = roles(
            config.listening.serve_relays,
            forwarding=config.cluster.forwarding,
        )
        self._below: dict[int, ServerConnection] = {}
        self.upstream = UpstreamLink(
            config,
            self.core,
            self.relays,
            self._forwarder,
            dispatch=self._dispatch,
            wake=self._wake.set,
            reply=self._reply,
            close_below=self._close_below,
        )
        self._writer = self.upstream.writer
        self.pump = Pump(
            config,
            self.core,
            self.relays,
            clients=self.clients,
            writer=self._writer,
            wake=self._wake,
            dispatch=self._dispatch,
        )
        self._reads_throttled = 0
        #: The time acting on subscribers' frames may take, all connections together.
        self._control = Throttle(config.limits.control_share, config.limits.control_burst)
        self._frames_refused = 0
        self._frames_received = 0
        self._closed_bad = 0
        self._hello_timeouts = 0
        self._verifier = None if config.auth is None else Verifier(config.auth)
        self.mqtt: Listener | None = None
        self.mqtt_ingest: ProducerLink | None = None
        self.mqtt_cluster: Cluster | None = None
        if config.mqtt.port is not None:
            self.mqtt, self.mqtt_ingest, self.mqtt_cluster = mqtt_parts(config, self._local_url)
        #: The map of responsibility shared with other relays (``cluster``), if any:
        #: its registry, and split and merge on load (``balancer``) if thresholds are given.
        self.membership: Membership | None = None
        self.registry: Registry | None = None
        self.balancer: Balancer | None = None
        if config.cluster.registry is not None:
            self.membership = Membership(
                config,
                self.core,
                self._writer,
                self.upstream,
                dispatch=self._dispatch,
                wake=self._wake.set,
            )
            self.registry, self.balancer = self.membership.registry, self.membership.balancer
            self.upstream.sharing = self.membership.sharing

    async def run(self, ready: Callable[[int], None] | None = None) -> None:
        """Serve until cancelled; ``ready(port)`` is called once serving and connected upstream.

        Sets the interpreter's switch interval and the garbage collector's youngest threshold
        (``RelayConfig.process.switch_interval``, ``young_collection``) meanwhile: they are the
        process's, and the relay is meant to be its process's main work.
        """
        interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
        if self.config.process.switch_interval > 0:
            sys.setswitchinterval(self.config.process.switch_interval)
        if self.config.process.young_collection > 0:
            gc.set_threshold(self.config.process.young_collection, *thresholds[1:])
        config = self.config
        ssl = None
        if config.listening.tls_cert is not None and config.listening.tls_key is not None:
            ssl = tls.server_context(config.listening.tls_cert, config.listening.tls_key)
        try:
            async with (
                serve(
                    self._serve_client,
                    self.config.listening.host,
                    self.config.listening.port,
                    max_size=MAX_FROM_SUBSCRIBER,
                    max_queue=MAX_QUEUED_FROM_SUBSCRIBER,
                    compression=None,
                    # Paused as soon as the kernel leaves bytes in the transport: a connection
                    # is idle (may take the next push) only when it has written everything.
                    # asyncio's TLS transport pauses at ``>=`` its high-water mark where the
                    # plain one pauses at ``>``: 0 would pause it when empty and never resume.
                    write_limit=0 if ssl is None else 1,
                    process_request=routes(self, metrics.route(self.samples, self.unready)),
                    # HTTP streams (``http.server``) last as long as their subscription:
                    # the opening handshake's timeout is the connection class's.
                    open_timeout=None,
                    create_connection=connection_type(self, self.config.limits.hello_timeout),
                    ssl=ssl,
                ) as server,
                asyncio.TaskGroup() as tasks,
            ):
                self.port = next(iter(server.sockets)).getsockname()[1]
                tasks.create_task(self.upstream.run())
                tasks.create_task(self.pump.run())
                tasks.create_task(self.pump.housekeeping())
                if self.mqtt_ingest is not None:
                    tasks.create_task(self.mqtt_ingest.run(self.config.upstream.reconnect_delay))
                if self.upstream.sharing is not None:
                    tasks.create_task(self.upstream.sharing.run())
                if self.membership is not None:  # joined before it is ready (relay.cluster)
                    scheme = "ws" if ssl is None else "wss"
                    own = f"{scheme}://{self.config.listening.host}:{self.port}"
                    await self.membership.join(tasks, self.config.cluster.advertise or own)
                if self.mqtt_cluster is not None:
                    joined = asyncio.Event()
                    tasks.create_task(self.mqtt_cluster.run(joined.set))
                    await joined.wait()
                if self.mqtt is not None:
                    mqtt_ready = asyncio.Event()
                    tasks.create_task(self.mqtt.run(lambda _: mqtt_ready.set()))
                    await mqtt_ready.wait()
                    log.info(
                        "relay %s: MQTT on %s:%d",
                        self.config.name,
                        self.config.listening.host,
                        self.mqtt.port,
                    )
                await self.upstream.ready.wait()
                log.info(
                    "relay %s listening on %s://%s:%d (%s; box views cut %s)",
                    self.config.name,
                    "ws" if ssl is None else "wss",
                    self.config.listening.host,
                    self.port,
                    self.config.policy.describe(),
                    "by the compiled kernels" if COMPILED else "with numpy: no kernels built",
                )
                if ready is not None:
                    ready(self.port)
        finally:
            self._writer.shutdown()  # the upstream task waited for its last write
            sys.setswitchinterval(interval)
            gc.set_threshold(*thresholds)

    def _local_url(self) -> str:
        """Where this relay serves subscribers, as a program on this host reaches it."""
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(
            self.config.listening.host
        )
        return f"ws://{host or self.config.listening.host}:{self.port}"

    def unready(self) -> str | None:
        """Why the relay should be sent no subscribers now (``GET /readyz``), or None.

        A relay without its publisher still accepts subscriptions (held until the catalog
        comes, ``relay.core.holding``), but a load balancer does better sending them elsewhere.
        """
        if not self.upstream.connected:
            return f"not connected upstream ({self.config.upstream.publisher})"
        if self.clients.full():
            return f"serving its most connections ({self.config.limits.max_connections})"
        return None

    def samples(self) -> list[metrics.Sample | metrics.Histogram]:
        """What ``GET /metrics`` on the relay's port answers (``relay.shell.samples``)."""
        return [
            metrics.build_info("relay"),
            self.pump.tick_to_push,
            *self._writer.histograms,
            *relay_samples(
                {**self.core.stats(), **self.relays.stats(), **self.upstream.stats()},
                **self.clients.counts(),
                upstream_connected=self.upstream.connected,
                reads_throttled=self._reads_throttled,
                refused=self.clients.refused_full,
                frames_refused=self._frames_refused,
                frames_received=self._frames_received,
                closed_bad=self._closed_bad,
                hello_timeouts=self._hello_timeouts,
            ),
            *(self.membership.samples() if self.membership is not None else []),
        ]

    # -- dispatch ------------------------------------------------------------------------

    def _dispatch(self, sends: Iterable[Send]) -> None:
        for send in sends:
            if send.to == UPSTREAM:
                if (sharing := self.upstream.sharing) is not None:
                    sharing.send(send)  # routed to the publisher or another relay
                else:
                    self.upstream.send(send.data())
            elif (outbound := self.clients.open.get(send.to)) is not None:
                outbound.offer(send.data(), send.control)

    # -- subscribers ---------------------------------------------------------------------

    async def _serve_client(self, websocket: ServerConnection) -> None:
        session = AcceptingSession(
            codec.to_relay(),
            f"fanout-relay {self.config.name}",
            self._roles,
            room=self.clients.room,
            datasets=lambda: visible(self.upstream.datasets, session.grant),
            authenticate=None if self._verifier is None else self._authenticate_hello,
        )
        config = self.config
        outbound = Outbound(
            websocket,
            config.limits.queue_limit,
            on_idle=lambda: self._on_writable(client),
            control=config.limits.max_subscriptions
            + config.limits.read_burst,  # its subscriptions' notices
        )
        client = self.clients.add(outbound)
        outbound.start()
        rate = self.config.limits.read_rate
        throttle = Throttle(rate, self.config.limits.read_burst) if rate > 0 else None
        refused: str | None = None  # why the relay closes the connection, if it does
        try:
            async with asyncio.timeout(self.config.limits.hello_timeout) as handshake:
                async for message in websocket:
                    started = time.perf_counter()  # decoding a frame is control time too
                    self._frames_received += 1
                    outcome = session.receive(message)
                    if outcome.reply is not None:
                        self._count_refusal(outcome.reply, outcome.close)
                        outbound.offer(codec.encode(outcome.reply), control=True)
                    if outcome.close:
                        refused = getattr(outcome.reply, "message", "closing")
                        break
                    if session.hello is not None and client not in self.clients.connected:
                        handshake.reschedule(expiry.deadline(session.grant))
                        self.clients.connect(client, session.grant, session.hello.capabilities)
                        if session.hello.role == "relay":  # a relay below: relay.tier
                            refused = await self._serve_below(client, websocket, session.hello)
                            break
                    await self._take(client, outcome.deliver, throttle, started)
        except TimeoutError:
            if client in self.clients.connected:  # after the hello: its token expired
                refused = expiry.EXPIRED
                outbound.offer(codec.encode(expiry.expired()))
            else:
                self._hello_timeouts += 1
                refused = f"no hello within {self.config.limits.hello_timeout:g} s; closing"
                outbound.offer(codec.encode(Error(code="handshake", message=refused)))
        except ConnectionClosed as closed:
            # The subscriber went away (its subscriptions end below), or sent a frame over
            # max_size, which websockets refuses by closing with 1009.
            too_big = closed.sent is not None and closed.sent.code == CloseCode.MESSAGE_TOO_BIG
            self._closed_bad += too_big
        finally:
            await self._end_client(client, websocket, outbound, refused)

    def _count_refusal(self, reply: object, close: bool) -> None:
        """Count a refusal of what a connection sent (not one for want of room)."""
        if isinstance(reply, Error) and reply.code != "unavailable":
            self._frames_refused += 1
            self._closed_bad += close

    async def _end_client(
        self, client: int, websocket: ServerConnection, outbound: Outbound, refused: str | None
    ) -> None:
        """A subscriber connection is over: its subscriptions end, its last frames go out, and
        it is closed with ``refused`` if the relay refused it."""
        self._below.pop(client, None)
        self.clients.remove(client)
        self.clients.finishing.add(outbound)  # still counted by ``samples`` while it finishes
        await outbound.finish()
        self.clients.finishing.discard(outbound)
        self.clients.closed(outbound)
        if refused is not None:
            await refuse(websocket, refused)

    # -- HTTP streams (``http.server.Relay``) --------------------------------------

    def attach(self, downstream: HttpSubscription) -> int:
        """Count an HTTP stream in as a subscriber connection; returns its client number."""
        client = self.clients.add(downstream)
        self.clients.connect(client, downstream.grant)
        return client

    def detach(self, client: int) -> None:
        """An HTTP stream is over: its subscription ends."""
        self.clients.closed(self.clients.remove(client))

    def subscribe(self, client: int, request: Subscribe) -> None:
        """An HTTP stream's subscription, as if its ``Subscribe`` frame had come."""
        self._subscribe(client, request, asyncio.get_running_loop().time())
        self._wake.set()

    async def confirm(self, request: Subscribe) -> None:
        """Before an HTTP stream's subscription is redirected, read the map afresh
        (``Registry.confirm``): an HTTP client follows redirects blindly, and the relay a
        part was just handed to reads the map only at its next beat."""
        if self.registry is not None and self.upstream.sharing is None:
            await self.registry.confirm(request)

    def writable(self, client: int) -> None:
        """An HTTP stream wrote everything it had."""
        self._on_writable(client)

    def authenticate(self, token: str | None, role: str = "subscriber") -> Grant | None:
        """What ``token`` grants, or None without authentication.

        Raises:
            Unauthorized: with authentication, no valid token granting ``role``.
        """
        return None if self._verifier is None else self._verifier.verify(token, role)

    def _authenticate_hello(self, hello: Hello) -> Grant | None:
        return self.authenticate(hello.token, hello.role)

    def room(self) -> str | None:
        """Why one more connection is refused, or None."""
        return self.clients.room()

    def catalog(self) -> list[DatasetInfo]:
        """The publisher's datasets as its last ``Catalog`` listed them."""
        return self.upstream.catalog

    async def _serve_below(
        self, client: int, websocket: ServerConnection, hello: Hello
    ) -> str | None:
        """Serve a relay below (``tiers``); returns why to close it, if it is closed."""
        self._below[client] = websocket
        return await serve_below(
            self.relays, client, websocket, hello, dispatch=self._for_below, wake=self._wake.set
        )

    def _for_below(self, sends: Iterable[Send]) -> None:
        """Dispatch what a relay below's frame made the core send (``cluster.sharing``:
        acquired from the publisher under the forward policy)."""
        if (sharing := self.upstream.sharing) is None:
            self._dispatch(sends)
        else:
            sharing.dispatch_below(sends)

    def _close_below(self, client: int) -> None:
        """Close a relay below's connection (the upstream was lost): it connects again."""
        if (below := self._below.get(client)) is not None:
            asyncio.get_running_loop().create_task(
                below.close(CloseCode.GOING_AWAY, "upstream lost; connect again")
            )

    async def _take(
        self, client: int, frame: object, throttle: Throttle | None, started: float
    ) -> None:
        """Act on a subscriber's frame (decoded from ``started``, ``time.perf_counter``), then
        pause reading if its throttle or the relay's control time says so
        (``relay.core.throttle``)."""
        loop = asyncio.get_running_loop()
        match frame:
            case Subscribe() as request:
                self._subscribe(client, request, loop.time())
            case Unsubscribe() as request:
                self._dispatch(self.core.on_unsubscribe(client, request))
            case Publish() as request:
                self._forward(client, request)
        self._wake.set()
        now = loop.time()
        # At most a second at a time: a connection overdrawn by many others is read again
        # within a second, one frame at a time, and a relay stopping does not wait for it.
        wait = min(self._control.take(now, time.perf_counter() - started), 1.0)
        if throttle is not None:
            wait = max(wait, throttle.take(now))
        if wait > 0:
            self._reads_throttled += 1
            await asyncio.sleep(wait)

    def _subscribe(self, client: int, request: Subscribe, now: float) -> None:
        """Carry out what admission (``relay.core.admission``) decides of a subscription:
        redirect it to the relay of the map responsible for it, refuse it, or hand it to the
        core (restricted to the connection's access rules)."""
        redirect = None
        if self.registry is not None and self.upstream.sharing is None:
            held = self.core.downstream.get((client, request.sub)) is not None
            redirect = self.registry.redirect(request, held)
        grant = self.clients.grants.get(client)
        match admit(request, grant, self.upstream.datasets, redirect):
            case Serve(request=admitted):
                self._dispatch(self.core.on_subscribe(client, admitted, now))
            case Redirect(error=error) | Refuse(error=error):
                self._dispatch([Send(client, error)])

    def _forward(self, client: int, request: Publish) -> None:
        """Send a subscriber's write on to the publisher, or refuse it (admission, then
        ``relay.core.forwarding``)."""
        grant = self.clients.grants.get(client)
        match admit_write(request, grant, authenticating=self._verifier is not None):
            case Refuse(error=error):
                self._reply(client, error)
                return
        action = self._forwarder.forward(client, request, self.upstream.connected)
        if isinstance(action, Error):
            self._reply(client, action)
        else:
            self.upstream.send(codec.encode(action))

    def _reply(self, client: int, frame: Published | Error) -> None:
        outbound = self.clients.open.get(client)
        if outbound is not None:
            outbound.offer(codec.encode(frame))

    def _on_writable(self, client: int) -> None:
        if self.core.on_writable(client):
            self._wake.set()
