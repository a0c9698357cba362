"""A relay's membership of a map of responsibility, wired to its core: the registry (leases in
Redis Cluster), split and merge on load (``splitting``) and, by policy, redirects or forwarding
(``sharing``). ``relay.shell.server`` holds one when started with ``--registry``. Rules:

1. **Joined before ready** (its first beat): a subscriber it accepts is never served by a relay
   the others do not know.
2. **Moved parts take their subscriptions** (redirect policy): when a part leaves this relay (a
   split, a merge, a relay joining), each held subscription of it ends with a redirect to the
   part's new relay (``moving``). Forward policy: ``sharing`` acquires it there.
3. **A lapsed lease** (``registry`` rule 8) ends each held subscription with a redirect to its
   owner in the map without this relay; forward policy: kept, parts taken from that map.
4. **Handed over warm** (redirect policy, ``handover``): the subscriptions of a part a split
   handed over end once its member holds the part ready, and what this relay was handed is
   warmed (``warming``); the map is read every ``LOOK`` s meanwhile, and by an idle standby.
   ``every`` subscriptions of a moved part end just after a seq, served first (rule 5 there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from fanout.cluster.moving import HeldMoves
from fanout.cluster.registry import REDIS_FAILURES, Registry
from fanout.cluster.registry import connect as registry_client
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.settings import Cluster
from fanout.cluster.sharing import Coverage, Publisher, Sharing, Writer
from fanout.cluster.splitting import Balancer
from fanout.cluster.warming import Warming
from fanout.metrics import Sample
from fanout.relay.core.relaycore import RelayCore, Send

log = logging.getLogger(__name__)

#: Seconds between two reads of the map while a handover is under way (rule 4).
LOOK = 0.25


class Membership:
    """The registry, the balancer (if thresholds are given) and the forward policy's sharing
    (if that is the policy) of one relay."""

    def __init__(
        self,
        settings: Cluster,
        name: str,
        core: RelayCore,
        writer: Writer,
        publisher: Publisher,
        *,
        coverage: Coverage,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
    ) -> None:
        """Args:
        settings: the relay's cluster section (``registry`` set).
        name: the relay's name in the map.
        core: the relay's core.
        writer: where whole seqs go (the forward policy's assembled seqs).
        publisher: the link to the publisher.
        coverage: the relay's coverage, with the relays below (the forward policy resyncs).
        dispatch: sends what the core answers.
        wake: wakes the relay's pump (subscriptions ended).

        Raises:
            ConfigError: the registry's address is not ``redis://HOST:PORT``.
        """
        assert settings.registry is not None, "a membership needs a registry"
        self.name, self.core, self._dispatch, self._wake = name, core, dispatch, wake
        self.registry = Registry(
            registry_client(settings.registry),
            name,
            lease=settings.lease,
            side=settings.side,
            standby=settings.standby,
        )
        #: Split and merge on load, if thresholds are given.
        self.balancer: Balancer | None = None
        if settings.thresholds.on:
            self.balancer = Balancer(
                core,
                self.registry,
                settings.thresholds,
                command=settings.split_command,
                wait=settings.split_wait,
                forward=settings.policy == "forward",
            )
        #: The forward policy's routing of primitives to their owners (None: redirects).
        self.sharing: Sharing | None = None
        if settings.policy == "forward":
            self.sharing = Sharing(coverage, self.registry, writer, publisher, dispatch)
        else:
            self.registry.watchers.append(self._parts_moved)
            self.registry.lapse_watchers.append(self._lapsed)
        #: Rules 2-4: the held subscriptions as parts move (``moving``), and what this relay
        #: warms of the parts handed to it.
        self.moves = HeldMoves(
            core, name, dispatch=dispatch, wake=wake, elsewhere=self.registry.elsewhere
        )
        self.warming = Warming(core, self.registry, dispatch)

    async def join(self, tasks: asyncio.TaskGroup, url: str) -> None:
        """Join the map as reached at ``url`` and return once in it (rule 1); the registry's
        beats and the balancer then run in ``tasks``."""
        self.registry.url = url
        in_map = asyncio.Event()
        tasks.create_task(self.registry.run(in_map.set))
        await in_map.wait()
        if self.balancer is not None:
            tasks.create_task(self.balancer.run())
        if self.sharing is None:
            tasks.create_task(self._handovers())

    def samples(self) -> list[Sample]:
        """The registry's and the balancer's figures for ``GET /metrics``."""
        balancer = self.balancer.samples() if self.balancer is not None else []
        return [*self.registry.samples(), *balancer]

    def _parts_moved(self, before: ResponsibilityMap, after: ResponsibilityMap) -> None:
        """Rules 2 and 4, the redirect policy's half."""
        self.warming.start()
        self.moves.settle(after, asyncio.get_running_loop().time())

    async def _handovers(self) -> None:
        """Rule 4: every ``LOOK`` s, read the map while a part handed over waits, one handed
        here warms, or this relay is an idle standby (a split may hand it parts: it warms
        them at once rather than at its next beat); and act on it."""
        loop = asyncio.get_running_loop()
        registry = self.registry
        while True:
            await asyncio.sleep(LOOK)
            idle = registry.standby and not registry.map.received(self.name)
            try:
                if self.moves.waiting or self.warming.busy or idle:
                    await registry.fresh()
                if self.warming.busy or self.warming.held:
                    await self.warming.settle(loop.time())
            except REDIS_FAILURES as error:
                log.warning("split: reading the map during a handover failed: %s", error)
            self.moves.look(registry.map, loop.time())

    def _lapsed(self, without: ResponsibilityMap) -> None:
        """Rule 3."""
        self.moves.lapsed()
