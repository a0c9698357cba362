"""A relay served by N processes on one port (``fanout relay --workers N``): a leader and workers.

The leader is the relay the publisher sees: it holds the one link upstream and the datasets'
state, and listens on a port of its own on loopback. Each worker is an edge relay of the leader
(``tiers``: its upstream is the leader's port, its state a copy of what its subscribers need)
listening on the relay's port with ``SO_REUSEPORT``, so that the kernel spreads subscribers'
connections across the workers. The leader reserves the port before starting them (a bound
socket that does not listen), hands each its configuration on stdin (its token to the leader, a
secret of this run, among it), restarts a worker that dies, sums their ``/metrics`` on its own
port (``relay.shell.summing``) and merges their admin answers (``relay.shell.relaywide``). A
worker dies with its leader (``PR_SET_PDEATHSIG``). MQTT is served by the leader only: a session
must not split across workers. docs/deploy.md says how to
run it, docs/benchmarks/relay.md what it costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hmac
import logging
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from http import HTTPStatus

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from fanout.auth import Grant
from fanout.errors import InvalidView
from fanout.http.admin import PATHS as ADMIN
from fanout.http.answers import Answer, plain_headers
from fanout.metrics import PATH, Histogram, Sample, render
from fanout.mqtt.setup import MqttFrontEnd
from fanout.relay.config import Cluster, Listening, Mqtt, RelayConfig, Upstream
from fanout.relay.core.sends import Send
from fanout.relay.shell import relaywide
from fanout.relay.shell.processes import Told, Worker, WorkerError, read_text, start
from fanout.relay.shell.server import RelayServer
from fanout.relay.shell.sharedstate import SharedStore
from fanout.relay.shell.summing import merged, summed
from fanout.relay.shell.workermap import MapForWorkers, WorkersLoad
from fanout.tiers.passing import PassedWrites
from fanout.tiers.shared import LAG
from fanout.wire.messages import (
    Acquire,
    Error,
    Frame,
    Hello,
    MapWanted,
    Publish,
    Published,
    WorkerLoad,
)

log = logging.getLogger(__name__)

#: Each worker's own figures the leader shows by worker (``NAME_by_worker{worker}``) beside
#: their sum: how the kernel spread the subscribers, and the rows each holds.
PER_WORKER = {
    "relay_connections": "Subscribers' connections on each worker (its number: label worker).",
    "relay_rows": "Rows each worker holds (its number: label worker).",
}
#: Seconds between two reads of the workers' ``/metrics`` (the leader's answer is this old).
SCRAPE_EVERY = 2.0
#: The first delay before restarting a worker that died (doubling up to ``RESTART_MOST``).
RESTART_DELAY, RESTART_MOST = 0.2, 5.0
#: What a worker is granted at its leader, and for how long (its life: the leader's).
WORKER_ROLES, WORKER_TERM = frozenset({"relay", "producer"}), 100 * 365 * 86400.0


def leader_config(config: RelayConfig) -> RelayConfig:
    """The leader's own configuration: ``config`` listening on loopback at
    ``process.workers_port`` for its workers (relays below it), not on the relay's port."""
    private = Listening("127.0.0.1", config.process.workers_port, serve_relays=True)
    return dataclasses.replace(config, listening=private)


def worker_config(
    config: RelayConfig, index: int, port: int, leader: str, secret: str, *, shared: str = ""
) -> RelayConfig:
    """Worker ``index``'s configuration: an edge relay of the leader at ``leader`` (presenting
    ``secret``), on the relay's port (``port``, resolved) shared with the others, reading the
    leader's state in the directory ``shared`` (empty: as rows); no MQTT listener (the
    leader's), no registry (told the leader's map, ``relay.shell.workermap``), no workers of
    its own."""
    upstream = Upstream(
        leader,
        token=secret,
        reconnect_delay=config.upstream.reconnect_delay,
        keepalive=config.upstream.keepalive,
    )
    listening = dataclasses.replace(
        config.listening,
        port=port,
        reuse_port=True,
        serve_relays=config.listening.serve_relays or config.cluster.forwarding,  # the peers'
    )
    process = dataclasses.replace(
        config.process, workers=1, workers_port=0, shared_directory=shared
    )
    planning = dataclasses.replace(config.planning, policy=config.policy)  # a map's, if in one
    return dataclasses.replace(
        config,
        upstream=upstream,
        planning=planning,
        name=f"{config.name}-{index}",
        listening=listening,
        process=process,
        cluster=Cluster(),
        mqtt=Mqtt(),
    )


@contextlib.contextmanager
def reserved(host: str, port: int) -> Iterator[int]:
    """Hold ``host:port`` (0: a free one) for the workers while in the block; yields the port.

    The socket is bound with ``SO_REUSEPORT`` and never listens: no connection comes to it,
    and no other program can take the port while the workers restart.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        held.bind((host, port))
        yield held.getsockname()[1]


class Leader(RelayServer):
    """The relay's process with ``--workers N``: the relay upstream of its workers, which it
    starts, restarts and sums the metrics of."""

    def __init__(self, config: RelayConfig, command: Sequence[str]) -> None:
        """Args:
        config: the relay's configuration, as given (``process.workers`` > 1).
        command: the program a worker runs (``fanout relay --worker``: its configuration
            read from stdin, ``relay.shell.worker``).
        """
        self.public = config
        super().__init__(leader_config(config))
        self._command = list(command)
        self._secret = secrets.token_urlsafe(32)
        #: Each worker's own loopback address (``ws://127.0.0.1:PORT``), by index, while it runs.
        self.addresses: dict[int, str] = {}
        self.restarts = 0
        self._texts: dict[int, str] = {}
        #: What a worker is told besides its configuration: whether it carries MQTT over
        #: WebSockets to the leader's port (``relay.shell.carry``), is told a map, and tells
        #: its load (``relay.shell.workermap``).
        cluster = config.cluster
        self._told = Told(
            carry=config.mqtt.websocket,
            in_map=cluster.registry is not None and not cluster.forwarding,
            balancing=cluster.registry is not None and cluster.thresholds.on,
            side=cluster.side,
            forward=cluster.forwarding,
        )
        #: The workers connected to the leader, by index; set once all are, the first time.
        self._connected: set[int] = set()
        self._all_connected = asyncio.Event()
        self._on_frame = self.relays.on_frame
        #: The leader's state in shared memory for the workers (``relay.shell.sharedstate``).
        self.shared: SharedStore | None = None  # made when it runs (a directory of its own)
        self.relays.on_frame = self._from_below  # type: ignore[method-assign]
        #: The workers' writes waiting for the publisher's answer (``tiers.passing``).
        self._writes = PassedWrites(self.relays)
        #: The map of responsibility told to the workers, in a map (``relay.shell.workermap``).
        self.map: MapForWorkers | None = None
        #: What the leader's balancer weighs, splitting on load: its workers' load.
        self.load: WorkersLoad | None = None
        if self.membership is not None and self.membership.sharing is None:
            self.map = MapForWorkers(self.membership.registry, self.relays, self._dispatch)
            self._welcome = self.relays.welcome
            self.relays.welcome = self._welcome_worker  # type: ignore[method-assign]
        if self.membership is not None and self.membership.balancer is not None:
            self.load = self.membership.balancer.holdings = WorkersLoad()
            self._gone = self.relays.gone
            self.relays.gone = self._worker_gone  # type: ignore[method-assign]
        self._public_port: asyncio.Future[int] | None = None
        self.http.elsewhere[PATH] = self.metrics_now
        for path in ADMIN:  # the relay's answers: the leader's and its workers' merged
            self.http.elsewhere[path] = self.admin_now

    def _mqtt_front_end(self, config: RelayConfig) -> MqttFrontEnd:
        """The relay's MQTT listener, on the relay's host as given (not the leader's loopback);
        MQTT over WebSockets comes to the leader's own port, carried by the workers."""
        host = dataclasses.replace(config.listening, host=self.public.listening.host)
        return MqttFrontEnd(dataclasses.replace(config, listening=host))

    def authenticate(self, token: str | None, role: str = "subscriber") -> Grant | None:
        """A worker (its token is this run's secret) is admitted as a relay below with every
        dataset, and as a producer (its subscribers' writes were admitted by it); anyone else
        as the relay's authentication says."""
        if role == "relay" and token is not None and hmac.compare_digest(token, self._secret):
            return Grant("worker", WORKER_ROLES, None, expires=time.time() + WORKER_TERM)
        return super().authenticate(token, role)

    def _from_below(self, client: int, frame: Frame) -> list[Send]:
        """A frame from a worker: its subscribers' writes go on to the publisher (``write``;
        the answer goes back to the worker, which answers its subscriber) and at once, as
        ``Pending``, to the other workers whose subscribers take live writes and hold its rows
        (``tiers.passing``); the rest to the relays below (``tiers.below``), which take no
        writes from relays below."""
        if isinstance(frame, MapWanted) and self.map is not None:
            self.map.wanted(client)
            return []
        if isinstance(frame, WorkerLoad) and self.load is not None:
            try:
                self.load.told(client, frame)
            except InvalidView as error:
                return [Send(client, Error("protocol", f"worker_load: {error}"))]
            return []
        if isinstance(frame, Acquire) and not frame.below and self.upstream.sharing is not None:
            # For a worker's subscribers: routed as the relay's own (the forward policy takes
            # other relays' parts from them), not as a relay below's (from the publisher).
            self._dispatch(self._on_frame(client, frame))
            return []
        if isinstance(frame, Publish):
            self._writes.forwarding(client, frame)
            self.write(client, frame)  # a write refused here is answered at once: passed to none
            self._dispatch(self._writes.forwarded(client, frame))
            return []
        return self._on_frame(client, frame)

    def _welcome_worker(self, client: int, hello: Hello) -> list[Send] | Error:
        """A worker welcomed in a map: told the map before its catalog (``workermap``)."""
        welcomed = self._welcome(client, hello)
        if isinstance(welcomed, Error) or self.map is None:
            return welcomed
        return [self.map.welcome(client), *welcomed]

    def _worker_gone(self, client: int) -> None:
        """A worker's connection ended: its load is no longer told (``workermap``)."""
        self._gone(client)
        if self.load is not None:
            self.load.gone(client)

    async def advertised(self) -> str:
        """The relay's URL in the map (``--advertise``, else the relay's port as given), once
        every worker listens on that port."""
        assert self._public_port is not None, "the leader runs"
        port = await self._public_port
        where = self.public.listening
        return self.public.cluster.advertise or f"{where.scheme}://{where.host}:{port}"

    def _reply(self, client: int, frame: Published | Error) -> None:
        """The answer to a worker's write; the other workers told it was pending are told how
        it settled, and once the publisher logged it the others it concerns are passed it
        (``Written``), as the publisher passes a write to the relays other than the one it
        came through: this leader (``tiers.passing``)."""
        super()._reply(client, frame)
        self._dispatch(self._writes.answered(client, frame))

    async def run(
        self,
        ready: Callable[[int], None] | None = None,
        listening: Callable[[int], None] | None = None,
    ) -> None:
        """Serve until cancelled; ``ready(port)`` once every worker listens on the relay's
        port and the leader is connected upstream; ``listening(port)`` once every worker
        listens (the workers start as soon as the leader listens, upstream or not)."""
        where = self.public.listening
        loop = asyncio.get_running_loop()
        up: asyncio.Future[int] = loop.create_future()
        listens: asyncio.Future[int] = loop.create_future()
        self._public_port = loop.create_future()
        serving_relays = where.serve_relays or self.public.cluster.forwarding  # at the workers
        if serving_relays and self.public.process.shared_state:
            log.info(
                "relay %s serves relays below: its workers get rows (the seqs' changes their"
                " relays below need), not its state in shared memory",
                self.public.name,
            )
        elif self.public.process.shared_state:  # files enough for every worker lagging at once
            self.shared = SharedStore(most=(LAG + 1) * self.public.process.workers + 2)
            self.relays.shared = self.shared
        try:
            with reserved(where.host, where.port) as port:
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(super().run(up.set_result, listens.set_result))
                    leader = f"ws://127.0.0.1:{await listens}"
                    log.info(
                        "relay %s: leader at %s (its /metrics sums the workers'), %d workers",
                        self.public.name,
                        leader,
                        self.public.process.workers,
                    )
                    await self._lead(port, leader, up, ready, listening)
        except BaseExceptionGroup as group:  # one failure, as the command line reports it
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                raise group.exceptions[0] from None
            raise
        finally:
            if self.shared is not None:
                self.shared.close()

    async def _lead(
        self,
        port: int,
        leader: str,
        up: asyncio.Future[int],
        ready: Callable[[int], None] | None,
        listening: Callable[[int], None] | None,
    ) -> None:
        """Start the workers, tell ``listening``, and ``ready`` once ``up`` (the leader is
        connected upstream); then keep them running until cancelled."""
        shared = "" if self.shared is None else str(self.shared.directory)
        configs = [
            worker_config(self.public, index, port, leader, self._secret, shared=shared)
            for index in range(1, self.public.process.workers + 1)
        ]
        starting = [
            start(self._command, i, c, self._told, functools.partial(self._connected_one, i))
            for i, c in enumerate(configs, 1)
        ]
        started = await asyncio.gather(*starting, return_exceptions=True)
        failed = [result for result in started if isinstance(result, BaseException)]
        if failed:  # those that started are stopped: the relay does not serve
            await asyncio.gather(*(w.stop() for w in started if isinstance(w, Worker)))
            raise failed[0]
        async with asyncio.TaskGroup() as keeping:
            for index, (config, first) in enumerate(zip(configs, started, strict=True), 1):
                assert isinstance(first, Worker)
                keeping.create_task(self._keep(index, config, first))
            keeping.create_task(self._scrape())
            assert self._public_port is not None
            self._public_port.set_result(port)  # the map may send subscribers there now
            if listening is not None:
                listening(port)
            await up
            await self._all_connected.wait()  # a subscriber's write is taken at once
            if ready is not None:
                ready(port)

    def _connected_one(self, index: int) -> None:
        """Worker ``index`` says it is connected to the leader."""
        self._connected.add(index)
        if len(self._connected) == self.public.process.workers:
            self._all_connected.set()

    async def _keep(self, index: int, config: RelayConfig, first: Worker) -> None:
        """Keep worker ``index`` running: restart it when it dies; stop it when cancelled."""
        worker: Worker | None = first
        delay = RESTART_DELAY
        try:
            while True:
                if worker is not None:
                    self.addresses[index] = worker.address
                    own = "http" + worker.address.removeprefix("ws") + PATH
                    log.info("relay worker %d serves; its own figures at %s", index, own)
                    status = await worker.process.wait()
                    self.addresses.pop(index, None)
                    self._connected.discard(index)
                    self._texts.pop(index, None)
                    if self.shared is not None:  # it reads none of the shared memory now
                        self.shared.holdings.forget(config.name)
                    log.warning("relay worker %d exited (%s): restarting it", index, status)
                    self.restarts += 1
                await asyncio.sleep(delay)
                try:
                    connected = functools.partial(self._connected_one, index)
                    worker = await start(self._command, index, config, self._told, connected)
                    delay = RESTART_DELAY
                except (OSError, WorkerError) as exc:
                    log.error("relay worker %d did not start again: %s", index, exc)
                    worker, delay = None, min(2 * delay, RESTART_MOST)
        finally:
            if worker is not None:
                await worker.stop()

    async def _scrape(self) -> None:
        """Read every worker's ``/metrics`` every ``SCRAPE_EVERY`` seconds."""
        while True:
            self.unshare()
            await self._read()
            await asyncio.sleep(SCRAPE_EVERY)

    async def _read(self) -> None:
        """Read every worker's ``/metrics`` now (one not read keeps its last)."""

        async def one(index: int, address: str) -> None:
            url = "http" + address.removeprefix("ws") + PATH
            try:
                text = (await asyncio.to_thread(read_text, url)).decode()
            except OSError as exc:
                log.debug("relay worker %d's /metrics not read: %s", index, exc)
                return
            if index in self.addresses:  # not gone meanwhile
                self._texts[index] = text

        await asyncio.gather(*(one(i, a) for i, a in list(self.addresses.items())))

    async def metrics_now(self, target: str, headers: Mapping[str, str]) -> Answer:
        """``GET /metrics`` of the relay, on the leader's port and (through it) on every
        worker's share of the relay's: the workers' figures read now, summed."""
        await self._read()
        body = render(self.samples())
        return Answer(HTTPStatus.OK, plain_headers(CONTENT_TYPE_PLAIN_0_0_4, body), body)

    async def admin_now(self, target: str, headers: Mapping[str, str]) -> Answer:
        """An admin request to the relay, on the leader's port and (through it) on every
        worker's share of the relay's: every process's answer, merged."""
        return await relaywide.answer(self.http, dict(self.addresses), target, headers)

    def unshare(self) -> None:
        """If the shared memory failed (no room to write a state): the workers get rows from
        now on, each closed once to connect again and take its primitives' snapshots."""
        if self.shared is None or self.shared.failure is None or self.relays.shared is None:
            return
        log.error("relay %s: the workers get rows from now on", self.public.name)
        self.relays.shared = None
        for client, below in list(self.relays.below.items()):
            if below.shared:
                self.tiers.close(client)

    def samples(self) -> list[Sample | Histogram]:
        """The workers' figures summed (as last read), the leader's of its link upstream and
        those the workers lack; the workers running, and restarted."""
        workers = [
            Sample(
                "relay_workers", "gauge", "Workers serving the relay's port.", len(self.addresses)
            ),
            Sample(
                "relay_shared_states",
                "counter",
                "States the leader wrote to shared memory for its workers.",
                0 if self.shared is None else self.shared.written,
            ),
            Sample(
                "relay_worker_restarts",
                "counter",
                "Workers the leader restarted after they died.",
                self.restarts,
            ),
            Sample(
                "relay_workers_writes_passed",
                "counter",
                "Workers' writes passed to other workers before the publisher answered.",
                self._writes.passed,
            ),
            Sample(
                "relay_workers_writes_not_passed",
                "counter",
                "Workers' writes not passed to the other workers: their rows not whole.",
                self._writes.invalid,
            ),
        ]
        for index, text in sorted(self._texts.items()):  # how the kernel spread the load
            own = {s.name: s.value for s in summed([text]) if isinstance(s, Sample)}
            for name, what in PER_WORKER.items():
                value = own.get(name, 0.0)
                workers.append(
                    Sample(f"{name}_by_worker", "gauge", what, value, {"worker": str(index)})
                )
        return [*merged(super().samples(), summed(self._texts.values())), *workers]
