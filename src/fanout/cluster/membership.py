"""A relay's membership of a map of responsibility, wired to its core: the registry (leases in
Redis Cluster), split and merge on load (``splitting``) and, by policy, redirects or forwarding
(``sharing``). ``relay.shell.server`` holds one when started with ``--registry``. Rules:

1. **Joined before ready** (its first beat): a subscriber it accepts is never served by a relay
   the others do not know.
2. **Moved parts take their subscriptions** (redirect policy): when a part leaves this relay (a
   split, a merge, a relay joining), each held subscription of it ends with a redirect to the
   part's new relay (``redirects`` rule 1). Forward policy: ``sharing`` acquires it there.
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

from fanout.cluster import handover
from fanout.cluster.registry import REDIS_FAILURES, Registry
from fanout.cluster.registry import connect as registry_client
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.settings import Cluster
from fanout.cluster.sharing import Publisher, Sharing, Writer
from fanout.cluster.splitting import Balancer, moved_subscriptions
from fanout.cluster.warming import Warming
from fanout.metrics import Sample
from fanout.relay.core.downstream import SubKey, Subscription
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.wire.messages import Error, Unsubscribe

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
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
    ) -> None:
        """Args:
        settings: the relay's cluster section (``registry`` set).
        name: the relay's name in the map.
        core: the relay's core.
        writer: where whole seqs go (the forward policy's assembled seqs).
        publisher: the link to the publisher.
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
            self.sharing = Sharing(core, self.registry, writer, publisher, dispatch)
        else:
            self.registry.watchers.append(self._parts_moved)
            self.registry.lapse_watchers.append(self._lapsed)
        #: Rule 4: the map held subscriptions are ended by, the parts handed over and waiting
        #: (part -> since when), and what this relay warms of the parts handed to it.
        self._served = self.registry.map
        self._waiting: dict[str, float] = {}
        self.warming = Warming(core, self.registry, dispatch)
        #: Held subscriptions whose part moved, waiting to be sent the last seq (``handover``
        #: rule 5): key -> (the subscription, its redirect, when its part moved).
        self._moving: dict[SubKey, tuple[Subscription, Error, float]] = {}

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
        self._settle()

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
                if self._waiting or self.warming.busy or idle:
                    await registry.fresh()
                if self.warming.busy or self.warming.held:
                    await self.warming.settle(loop.time())
            except REDIS_FAILURES as error:
                log.warning("split: reading the map during a handover failed: %s", error)
            if self._waiting:
                self._settle()
            elif self._moving:
                self._end_moving(loop.time())

    def _settle(self) -> None:
        """End the held subscriptions whose part moved, a part handed over only once its
        member holds it warm (rule 4)."""
        now = asyncio.get_running_loop().time()
        before = self._served
        self._served, self._waiting = handover.served(
            self.registry.map, before, self.name, now, self._waiting
        )
        moving: list[Subscription] = []
        for client, redirect in moved_subscriptions(self.core, before, self._served, self.name):
            assert redirect.ref is not None, "a moved subscription's redirect names it"
            held = self.core.downstream.get((client, redirect.ref))
            if held is not None and held.key not in self._moving:
                self._moving[held.key] = (held, redirect, now)
                moving.append(held)
        self._end_moving(now)
        for held in moving:  # those not due yet are sent the giver's last seq first (rule 5)
            if held.key in self._moving and held.key in self.core.scheduler:
                self.core.scheduler.reprioritise(held.key, held.priority + handover.FIRST)

    def _end_moving(self, now: float) -> None:
        """End each moving subscription that is due (``handover`` rule 5); forget those that
        ended otherwise meanwhile (unsubscribed, or a lapsed lease)."""
        ended = False
        for key, (held, redirect, since) in list(self._moving.items()):
            if self.core.downstream.get(key) is not held:
                del self._moving[key]
                continue
            state = self.core.datasets.get(held.dataset)
            last = None if state is None or state.seq < 0 else (state.epoch, state.seq)
            sent = None if held.cursor is None else (held.cursor.epoch, held.cursor.seq)
            if not handover.due(sent, last, now - since):
                continue
            del self._moving[key]
            # The core's Unsubscribed is not sent: the redirect is what ends it for the client.
            self.core.on_unsubscribe(held.client, Unsubscribe(held.sub))
            self._dispatch([Send(held.client, redirect)])
            ended = True
        if ended:
            self._wake()

    def _lapsed(self, without: ResponsibilityMap) -> None:
        """Rule 3."""
        ended = [
            (held.client, self.registry.elsewhere(held.dataset, held.view, held.sub))
            for held in self.core.downstream
        ]
        for client, answer in ended:
            self.core.on_unsubscribe(client, Unsubscribe(answer.ref or 0))
            self._dispatch([Send(client, answer)])
        self._wake()
