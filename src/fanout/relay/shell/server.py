"""The relay's composition root: ``RelayCore`` and the tasks and front ends around it.

One ``TaskGroup`` owns its tasks: the upstream link (``relay.shell.upstreamlink``, batches
handed to ``relay.shell.writer``), the pump and housekeeping (``relay.shell.pump``) and, if the
relay is in a map of responsibility, ``cluster.membership``. Front ends (``relay.api.FrontEnd``:
HTTP, WebSocket, tiers, MQTT) are each started with the relay's API (this class) and that group
and stopped the same way; what they ask is admitted or not by ``relay.core.admission`` and
carried out here, and their connections are counted in ``relay.shell.clients``.

Nothing waits on a slow connection but its own writer task: a subscriber is pushed to only once
its connection has written everything before, and one that stalls or fills its queue is closed
(1008, ``slow consumer``; docs/concepts.md). Subscribers' writes forwarded to the publisher and
subscriptions held until the catalog comes: docs/protocol.md; how the parts fit:
docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fanout import allocator, metrics
from fanout.auth import Grant, Verifier
from fanout.cluster.membership import Membership
from fanout.http.server import HttpFrontEnd
from fanout.mqtt.setup import MqttFrontEnd
from fanout.relay.api import Downstream, FrontEnd, Redirects
from fanout.relay.config import RelayConfig
from fanout.relay.core import explaining
from fanout.relay.core.admission import Redirect, Refuse, Serve, admit, admit_write, roles
from fanout.relay.core.every import EVERY_BURST
from fanout.relay.core.forwarding import Forwarder
from fanout.relay.core.holding import Holding
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.data.tables import TableStore
from fanout.relay.kernels.compiled import COMPILED
from fanout.relay.shell import admin
from fanout.relay.shell.clients import Clients
from fanout.relay.shell.pump import Pump
from fanout.relay.shell.samples import relay_samples
from fanout.relay.shell.upstreamlink import UpstreamLink
from fanout.tiers.below import Relays
from fanout.tiers.link import Tiers
from fanout.transducers import Budget, Transducers
from fanout.views import View
from fanout.websocket.server import WebSocketServer
from fanout.wire import codec
from fanout.wire.messages import (
    DatasetInfo,
    Error,
    Publish,
    Published,
    Role,
    Subscribe,
    Unsubscribe,
)

log = logging.getLogger(__name__)


class RelayServer:
    """One relay process's event loop side, and the relay's API to its front ends
    (``relay.api.RelayApi``)."""

    def __init__(self, config: RelayConfig) -> None:
        """A relay that will run as ``config`` (checked when it was made) says."""
        self.config = config
        limits = config.limits
        self.core = RelayCore(
            config.policy,
            config.planning.aging,
            engine=TableStore(limits.query_timeout),
            max_subscriptions=limits.max_subscriptions,
            sql_share=limits.sql_share,
            sql_burst=limits.sql_burst,
            holding=Holding(limits.catalog_wait, limits.max_held),
            # A burst goes out while the connection drains: half its queue at most.
            every_burst=max(1, min(EVERY_BURST, limits.queue_limit // 2)),
            # a transducer's evaluation may take what a subscriber's SQL query may
            transducers=Transducers(Budget(seconds=limits.query_timeout)),
        )
        self.clients = Clients(self.core, limits.max_connections)
        #: subscribers' writes forwarded to the publisher, awaiting its answers
        self._forwarder = Forwarder()
        self._wake = asyncio.Event()
        #: Relays below this one (``tiers``): batches are forwarded to them as written.
        self.relays = Relays(self.core, max_primitives=limits.max_subscriptions)
        self._roles = roles(config.listening.serve_relays, forwarding=config.cluster.forwarding)
        self._verifier = None if config.auth is None else Verifier(config.auth)
        self.tiers = Tiers(self.relays, dispatch=self._for_below)
        where = config.listening
        self.websocket = WebSocketServer(config, self.tiers.serve, lambda: self.http.listener)
        self.http = HttpFrontEnd(
            where.host,
            where.port,
            opening=limits.hello_timeout,
            upgrade=self.websocket.take,
            tls_files=where.tls,
            reuse_port=where.reuse_port,
        )
        self.mqtt = self._mqtt_front_end(config) if config.mqtt.port is not None else None
        mqtt_websockets = None if self.mqtt is None else self.mqtt.on_the_port(self._listener)
        if mqtt_websockets is not None:
            self.http.mqtt_upgrade = mqtt_websockets.take
        if self.mqtt is not None:
            self.http.pages.update(self.mqtt.pages())
            self.mqtt.join_live_path(self.core.serving.live, self._dispatch)
        #: Why a front end could not start, if one could not.
        self._not_started: Exception | None = None
        self.upstream = UpstreamLink(
            config,
            self.core,
            self.relays,
            self._forwarder,
            dispatch=self._dispatch,
            wake=self._wake.set,
            reply=self._reply,
            close_below=self.tiers.close,
            subscribe=self.subscribe,
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
        #: The map of responsibility shared with other relays (``cluster``), if any:
        #: its registry, and split and merge on load (``balancer``) if thresholds are given.
        self.membership: Membership | None = None
        if config.cluster.registry is not None:
            self.membership = Membership(
                config.cluster,
                config.name,
                self.core,
                self._writer,
                self.upstream,
                coverage=self.relays,
                dispatch=self._dispatch,
                wake=self._wake.set,
            )
            self.upstream.sharing = self.membership.sharing
        #: What decides redirects: the registry; a worker's copy of its leader's map.
        self.registry: Redirects | None = None
        if self.membership is not None:
            self.registry = self.membership.registry
        self.balancer = None if self.membership is None else self.membership.balancer

    def _mqtt_front_end(self, config: RelayConfig) -> MqttFrontEnd:
        """The MQTT listener of a relay configured as ``config`` (a leader's: on the relay's
        host, ``relay.shell.workers``)."""
        return MqttFrontEnd(config)

    def _listener(self) -> asyncio.Server | None:
        return self.http.listener

    @property
    def port(self) -> int | None:
        """The port subscribers connect to, once the relay serves."""
        return self.http.port if self.http.listener is not None else None

    async def run(
        self,
        ready: Callable[[int], None] | None = None,
        listening: Callable[[int], None] | None = None,
    ) -> None:
        """Serve until cancelled; ``ready(port)`` is called once serving and connected upstream,
        ``listening(port)`` once the port listens (before any upstream: subscribers are held
        until the catalog).

        Sets the interpreter's switch interval and the garbage collector's youngest threshold
        (``RelayConfig.process``) meanwhile: they are the process's, and the relay is meant to
        be its process's main work; and glibc's mmap threshold and trimming (``fanout.allocator``;
        the threshold stays after: glibc cannot say what it was).
        """
        process = self.config.process
        interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
        if process.switch_interval > 0:
            sys.setswitchinterval(process.switch_interval)
        if process.young_collection > 0:
            gc.set_threshold(process.young_collection, *thresholds[1:])
        allocator.tune(process.mmap_threshold)
        started: list[FrontEnd] = []
        try:
            async with asyncio.TaskGroup() as tasks:
                on_the_port: tuple[FrontEnd, ...] = (self.http, self.websocket, self.tiers)
                for front_end in on_the_port:  # HTTP listens; relays below come through it
                    await self._start(front_end, tasks, started)
                if listening is not None:
                    assert self.port is not None, "the HTTP front end listens"
                    listening(self.port)
                tasks.create_task(self.upstream.run())
                tasks.create_task(self.pump.run())
                tasks.create_task(self.pump.housekeeping())
                tasks.create_task(allocator.trimming(process.trim_every))
                if self.upstream.sharing is not None:
                    tasks.create_task(self.upstream.sharing.run())
                if self.membership is not None:  # joined before it is ready (cluster)
                    await self.membership.join(tasks, await self.advertised())
                if self.mqtt is not None:  # it reads the relay's port (``mqtt.fromlog``)
                    await self._start(self.mqtt, tasks, started)
                await self.upstream.ready.wait()
                port = self.port
                assert port is not None, "the WebSocket server listens"
                log.info(
                    "relay %s listening on %s://%s:%d (%s; box views cut %s)",
                    self.config.name,
                    self.config.listening.scheme,
                    self.config.listening.host,
                    port,
                    self.config.policy.describe(),
                    "by the compiled kernels" if COMPILED else "with numpy: no kernels built",
                )
                if ready is not None:
                    ready(port)
        except BaseExceptionGroup as group:
            # A front end that could not start (its port in use, say) is raised as itself,
            # as the command line reports it, not wrapped by the TaskGroup it started in.
            if isinstance(self._not_started, Exception):
                raise self._not_started from None
            raise group
        finally:
            for front_end in reversed(started):
                await front_end.stop()
            self._writer.shutdown()  # the upstream task waited for its last write
            sys.setswitchinterval(interval)
            gc.set_threshold(*thresholds)

    async def _start(
        self, front_end: FrontEnd, tasks: asyncio.TaskGroup, started: list[FrontEnd]
    ) -> None:
        """Start ``front_end`` (``relay.api.FrontEnd``) and keep it to stop; remember why not."""
        try:
            await front_end.start(self, tasks)
        except Exception as exc:
            self._not_started = exc
            raise
        started.append(front_end)

    async def advertised(self) -> str:
        """The URL the map of responsibility gives for this relay (``--advertise``, else as
        it listens), once subscribers may connect there."""
        where = self.config.listening
        return self.config.cluster.advertise or f"{where.scheme}://{where.host}:{self.port}"

    def local_url(self) -> str:
        """Where this relay serves subscribers, as a program on this host reaches it."""
        listening = self.config.listening.host
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(listening)
        return f"ws://{host or listening}:{self.port}"

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
            allocator.trim_seconds,
            *relay_samples(
                {**self.core.stats(), **self.relays.stats(), **self.upstream.stats()},
                **self.clients.counts(),
                **self.websocket.counts(),
                upstream_connected=self.upstream.connected,
                refused=self.clients.refused_full,
            ),
            *(self.membership.samples() if self.membership is not None else []),
            *(self.mqtt.samples() if self.mqtt is not None else []),
            *admin.samples(self.core),
            metrics.Sample(
                "relay_push_cpu_seconds",
                "counter",
                "CPU seconds the event loop spent in rounds of pushes.",
                self.pump.push_cpu,
            ),
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
                if send.control or not self._probing(send.to):
                    outbound.offer(send.data(), send.control)
                else:
                    self._probe(send.to, outbound, send.data())

    def _probing(self, client: int) -> bool:
        """Whether a push to ``client`` takes a probe now (``relay.core.links``)."""
        return self.core.serving.links.pushed(client, asyncio.get_running_loop().time())

    def _probe(self, client: int, outbound: Downstream, data: bytes) -> None:
        """Push ``data`` to a connection and ask it to acknowledge what it was sent."""
        links, now = self.core.serving.links, asyncio.get_running_loop().time()
        if outbound.offer_probed(data, lambda at: links.acked(client, at, outbound.sent_bytes)):
            links.probed(client, outbound.sent_bytes, now)

    def _for_below(self, sends: Iterable[Send]) -> None:
        """Dispatch what a relay below's frame made the core send (``cluster.sharing``:
        acquired from the publisher under the forward policy)."""
        if (sharing := self.upstream.sharing) is None:
            self._dispatch(sends)
        else:
            sharing.dispatch_below(sends)

    def _reply(self, client: int, frame: Published | Error) -> None:
        outbound = self.clients.open.get(client)
        if outbound is not None:
            outbound.offer(codec.encode(frame))

    # -- the relay's API (``relay.api.RelayApi``) -----------------------------------------

    def open(self, downstream: Downstream) -> int:
        """Count a new connection in, not connected yet; returns its client number."""
        return self.clients.add(downstream)

    def connect(self, client: int, grant: object, capabilities: Sequence[str] = ()) -> None:
        """The connection's handshake is done, its token granting ``grant``."""
        self.clients.connect(client, grant, capabilities)

    def close(self, client: int) -> Downstream:
        """The connection is over: its subscriptions end; counted until ``closed``."""
        downstream = self.clients.remove(client)
        self.clients.finishing.add(downstream)  # still counted by ``samples`` while it finishes
        return downstream

    def closed(self, downstream: Downstream) -> None:
        """The connection's last bytes went out."""
        self.clients.finishing.discard(downstream)
        self.clients.closed(downstream)

    def subscribe(self, client: int, request: Subscribe) -> None:
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
                now = asyncio.get_running_loop().time()
                self._dispatch(self.core.on_subscribe(client, admitted, now))
                self._dispatch(self.relays.live_writes((client, admitted.sub)))  # before its push
            case Redirect(error=error) | Refuse(error=error):
                self._dispatch([Send(client, error)])
        self._wake.set()

    def unsubscribe(self, client: int, request: Unsubscribe) -> None:
        """End one of the connection's subscriptions."""
        self._dispatch(self.core.on_unsubscribe(client, request))

    def write(self, client: int, request: Publish) -> None:
        """Send a subscriber's write on to the publisher, or refuse it (admission, then
        ``relay.core.forwarding``)."""
        grant = self.clients.grants.get(client)
        match admit_write(request, grant, authenticating=self.authenticating):
            case Refuse(error=error):
                self._reply(client, error)
                return
        action = self._forwarder.forward(client, request, self.upstream.connected)
        if isinstance(action, Error):
            self._reply(client, action)
        else:
            self.upstream.send(codec.encode(action))
            now = asyncio.get_running_loop().time()  # shown at once (``relay.core.livepath``)
            self._dispatch(self.core.serving.live.write(request, action.req, now))

    async def confirm(self, request: Subscribe) -> None:
        """Before an HTTP stream's subscription is redirected, read the map afresh
        (``Registry.confirm``): an HTTP client follows redirects blindly, and the relay a
        part was just handed to reads the map only at its next beat."""
        if self.registry is not None and self.upstream.sharing is None:
            await self.registry.confirm(request)

    def writable(self, client: int) -> None:
        """The connection wrote everything it had."""
        if self.core.on_writable(client):
            self._wake.set()

    def wake(self) -> None:
        """Something changed: the pump looks for due pushes."""
        self._wake.set()

    def room(self) -> str | None:
        """Why one more connection is refused, or None."""
        return self.clients.room()

    def authenticate(self, token: str | None, role: str = "subscriber") -> Grant | None:
        """What ``token`` grants, or None without authentication.

        Raises:
            Unauthorized: with authentication, no valid token granting ``role``.
        """
        return None if self._verifier is None else self._verifier.verify(token, role)

    @property
    def authenticating(self) -> bool:
        """Whether connections must present a token."""
        return self._verifier is not None

    @property
    def roles(self) -> frozenset[Role]:
        """The roles a ``Hello`` may take here."""
        return self._roles

    def catalog(self) -> list[DatasetInfo]:
        """The publisher's datasets as its last ``Catalog`` listed them."""
        return self.upstream.catalog

    def datasets(self) -> Mapping[str, str]:
        """The publisher's datasets, name -> index kind."""
        return self.upstream.datasets

    def explain(
        self, dataset: str, view: View, rules: Mapping[str, Sequence[str]] | None, rate: float
    ) -> dict[str, Any]:
        """A live EXPLAIN of ``view`` of ``dataset`` (``relay.core.explaining``)."""
        now = asyncio.get_running_loop().time()
        links = (self.core.serving.links, now)
        return explaining.explain(self.core.parts, dataset, view, rules, rate, links=links)

    def subscribers(self, count: int) -> dict[str, Any]:
        """The ``count`` subscriptions sent the most bytes (``relay.shell.admin``)."""
        now = asyncio.get_running_loop().time()
        return admin.subscribers(self.core, self.clients.grants, self.pump.push_cpu, count, now)

    def batches(self) -> dict[str, Any]:
        """The last batches' wall-clock times through the relay (``relay.shell.admin``)."""
        return admin.batches(self._writer.timings, self.pump.pushed)

    def held(self) -> Mapping[str, int]:
        """The rows held of each dataset now: its active state buffer's (``relay_rows`` in
        ``GET /metrics`` is their sum)."""
        return {name: len(state.buffer.active) for name, state in self.core.datasets.items()}
