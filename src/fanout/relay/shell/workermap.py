"""A leader's map of responsibility, told to its workers (``fanout relay --workers N
--registry``): the leader keeps the lease, and each worker decides of its own subscriptions by
the map it is told (``cluster.mapcopy``). Rules:

1. **Before the catalog**: a worker connecting is told the map first (``Responsibility``).
2. **On every change**: the map read changed, the lease lapsed, or it is the relay's again.
3. **Asked afresh** (``MapWanted``): the leader reads the map (``Registry.fresh``) and answers
   the worker that asked with it, read or not (Redis away: the map as last read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from fanout.cluster.mapcopy import telling
from fanout.cluster.registry import REDIS_FAILURES, Registry
from fanout.relay.core.sends import Send
from fanout.tiers.below import Relays
from fanout.wire.messages import Responsibility

log = logging.getLogger(__name__)


class MapForWorkers:
    """What a leader tells its workers of its registry's map."""

    def __init__(
        self, registry: Registry, relays: Relays, dispatch: Callable[[Iterable[Send]], None]
    ) -> None:
        """Args:
        registry: the leader's registry.
        relays: the relays below the leader: its workers.
        dispatch: sends frames to them.
        """
        self.registry, self._relays, self._dispatch = registry, relays, dispatch
        registry.watchers.append(lambda before, after: self.tell_all())
        registry.lapse_watchers.append(lambda without: self.tell_all())
        registry.back_watchers.append(self.tell_all)
        self._asking: set[asyncio.Task[None]] = set()

    def frame(self) -> Responsibility:
        """The map and the lease now."""
        registry = self.registry
        return telling(registry.name, registry.map, registry.serving)

    def tell_all(self) -> None:
        """Rule 2."""
        frame = self.frame()
        self._dispatch([Send(client, frame) for client in self._relays.below])

    def welcome(self, client: int) -> Send:
        """Rule 1: what a worker connecting is told first."""
        return Send(client, self.frame())

    def wanted(self, client: int) -> None:
        """Rule 3."""
        task = asyncio.get_running_loop().create_task(self._fresh(client))
        self._asking.add(task)
        task.add_done_callback(self._asking.discard)

    async def _fresh(self, client: int) -> None:
        try:
            await self.registry.fresh()
        except REDIS_FAILURES as error:
            log.warning("registry: reading the map for a worker failed: %s", error)
        if client in self._relays.below:
            self._dispatch([Send(client, self.frame())])
