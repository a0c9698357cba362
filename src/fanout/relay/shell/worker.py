"""One worker of a relay with ``--workers N`` (``relay.shell.workers``): its process.

Started by its leader as ``fanout relay --worker``, it reads its number and configuration from
stdin (they hold its token to the leader), asks the kernel to end it when the leader ends
(``PR_SET_PDEATHSIG``, Linux), and serves as an edge relay of the leader on the relay's port
(shared, ``SO_REUSEPORT``) and on a loopback port of its own, where its leader reads its
``/metrics``. It says ``fanout worker ready ws://127.0.0.1:PORT`` (that port) once it serves.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import pickle
import signal
import sys
import urllib.parse
from collections.abc import Callable, Iterable

import msgspec

from fanout.cluster.mapcopy import MapCopy
from fanout.cluster.splitting import EVERY, CoreHoldings
from fanout.http.admin import PATHS as ADMIN
from fanout.http.server import DATASETS, HttpFrontEnd
from fanout.metrics import PATH, Histogram, Sample
from fanout.mqtt.setup import PAGES as MQTT_PAGES
from fanout.relay.config import RelayConfig
from fanout.relay.core.sends import UPSTREAM, Send
from fanout.relay.shell import loops
from fanout.relay.shell.carry import Carrier, asked
from fanout.relay.shell.processes import CONNECTED, READY, Told
from fanout.relay.shell.server import RelayServer
from fanout.wire import codec
from fanout.wire.messages import Acquire, MapWanted

log = logging.getLogger(__name__)

#: ``prctl``'s option asking for a signal when the parent ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


class WorkerServer(RelayServer):
    """A relay serving as worker ``index`` of its leader: also on its own loopback port."""

    def __init__(self, config: RelayConfig, index: int, told: Told | None = None) -> None:
        """Args:
        config: its configuration (``relay.shell.workers.worker_config``).
        index: its number among the leader's workers, from 1.
        told: whether it carries MQTT over WebSockets on the relay's port to the leader's
            port, where the MQTT sessions are (``relay.shell.carry``); whether the relay is
            in a map of responsibility, whose map the leader tells it (``cluster.mapcopy``),
            and splits on load, when it tells the leader its load every second.
        """
        super().__init__(config)
        self.index = index
        told = told or Told()
        self._told = told
        #: The leader's map, if the relay is in one: what redirects this worker's subscriptions.
        self.map: MapCopy | None = None
        if told.in_map:
            self.map = MapCopy(self.core, dispatch=self._dispatch, wake=self.wake, ask=self._ask)
            self.registry = self.map
            self.upstream.on_map = self.map.tell
        at = urllib.parse.urlsplit(config.upstream.publisher)  # the leader: ws://127.0.0.1:P
        assert at.hostname is not None and at.port is not None
        self.carrier: Carrier | None = None
        if told.carry:
            self.carrier = Carrier(at.hostname, at.port)
            self.http.mqtt_upgrade = self.carrier.take
        self.own = HttpFrontEnd(
            "127.0.0.1", 0, opening=config.limits.hello_timeout, upgrade=self.websocket.take
        )
        # The relay's port answers the relay's /metrics, datasets, admin API and MQTT pages,
        # the leader's answers for every worker; this worker's own port its own (which the
        # leader reads).
        ask = functools.partial(asked, f"http://{at.hostname}:{at.port}")
        asked_of_the_leader = (PATH, DATASETS, *ADMIN, *MQTT_PAGES)  # MQTT's on the leader
        self.http.elsewhere.update(dict.fromkeys(asked_of_the_leader, ask))

    async def run(
        self,
        ready: Callable[[int], None] | None = None,
        listening: Callable[[int], None] | None = None,
    ) -> None:
        """Serve until cancelled; ``ready(port)`` with its own loopback port once it listens
        on both ports, connected to its leader or not (its subscribers wait for the catalog,
        as they would at a relay whose publisher is away), and ``CONNECTED`` on stdout once
        connected to it; ``listening`` is not called."""
        async with asyncio.TaskGroup() as tasks:
            await self.own.start(self, tasks)
            if self.map is not None:
                tasks.create_task(self.map.run())
            if self._told.balancing:
                tasks.create_task(self._tell_load())
            try:
                await super().run(
                    lambda _: print(CONNECTED, flush=True),
                    lambda _: ready and ready(self.own.port),
                )
            finally:
                await self.own.stop()

    async def _tell_load(self) -> None:
        """Every ``splitting.EVERY`` s, tell the leader this worker's load (its balancer weighs
        every worker's, ``relay.shell.workermap``)."""
        told = self._told
        holdings = CoreHoldings(self.core, told.forward)
        while True:
            await asyncio.sleep(EVERY)
            if self.upstream.connected:
                self.upstream.send(codec.encode(holdings.told(told.side)))

    def _for_below(self, sends: Iterable[Send]) -> None:
        """What a relay below made this worker send: its acquisitions marked as for relays
        below (``Acquire.below``), which the leader of a relay that forwards routes to the
        publisher, as a relay of one process does its relays' below (``cluster.upstreams``)."""
        self._dispatch(
            Send(s.to, msgspec.structs.replace(s.frame, below=True))
            if s.to == UPSTREAM and isinstance(s.frame, Acquire)
            else s
            for s in sends
        )

    def _ask(self) -> bool:
        """Ask the leader to read its map afresh (``cluster.mapcopy`` rule 3); False: not
        connected to it."""
        if not self.upstream.connected:
            return False
        self.upstream.send(codec.encode(MapWanted()))
        return True

    def samples(self) -> list[Sample | Histogram]:
        """The relay's figures (its redirects in a map) and which worker this is
        (``fanout_relay_worker``)."""
        which = Sample(
            "relay_worker",
            "gauge",
            "Which worker of the relay answered (its number in the label worker); always 1.",
            1,
            {"worker": str(self.index)},
        )
        own = [*super().samples(), *(self.map.samples() if self.map is not None else []), which]
        if self.carrier is None:
            return own
        carried = [
            Sample(
                "relay_mqtt_websockets_carried",
                "counter",
                "MQTT over WebSockets connections a worker carried to its leader.",
                self.carrier.carried,
            ),
            Sample(
                "relay_mqtt_websockets_not_carried",
                "counter",
                "MQTT over WebSockets connections a worker could not carry to its leader.",
                self.carrier.failed,
            ),
        ]
        return [*own, *carried]


def run(stdin: bytes) -> int:
    """Run the worker ``stdin`` describes (``relay.shell.workers``) until its leader stops it."""
    _end_with_parent()
    index, config, told = pickle.loads(stdin)  # written by the leader, our parent
    assert isinstance(config, RelayConfig) and isinstance(told, Told)
    server = WorkerServer(config, index, told)

    def ready(port: int) -> None:
        print(f"{READY}ws://127.0.0.1:{port}", flush=True)

    loops.run(_until_stopped(server, ready), config.process.loop)
    return 0


def _end_with_parent() -> None:
    """Ask Linux for SIGTERM when the leader ends, however it ends; end now if it has."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent or parent == 1:
        raise SystemExit("the relay's leader is gone")


async def _until_stopped(server: WorkerServer, ready: Callable[[int], None]) -> None:
    """Serve until SIGTERM (the leader stopping it, or ending), then stop cleanly."""
    running = asyncio.current_task()
    assert running is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, running.cancel)
    try:
        await server.run(ready)
    except asyncio.CancelledError:
        log.info("relay worker %d: stopped", server.index)
