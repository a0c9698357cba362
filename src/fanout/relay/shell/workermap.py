"""A leader's map of responsibility, told to its workers (``fanout relay --workers N
--registry``): the leader keeps the lease, and each worker decides of its own subscriptions by
the map it is told (``cluster.mapcopy``). Rules:

1. **Before the catalog**: a worker connecting is told the map first (``Responsibility``).
2. **On every change**: the map read changed, the lease lapsed, or it is the relay's again.
3. **Asked afresh** (``MapWanted``): the leader reads the map (``Registry.fresh``) and answers
   the worker that asked with it, read or not (Redis away: the map as last read).
4. **Load**: splitting on load, the leader's balancer weighs the workers' subscriptions as each
   last told them (``WorkerLoad``, every second), and its CPU with theirs (``WorkersLoad``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from fanout.cluster import handover
from fanout.cluster.mapcopy import telling
from fanout.cluster.registry import REDIS_FAILURES, Registry
from fanout.relay.core.sends import Send
from fanout.tiers.below import Relays
from fanout.views import parse_region
from fanout.wire.messages import Responsibility, WorkerLoad

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


class WorkersLoad:
    """What a leader's balancer weighs (``cluster.splitting.Holdings``, rule 4): its workers'
    subscriptions as each last told them, their counters summed with those of the workers gone
    (so that the sums never fall when one restarts), and its own CPU with theirs."""

    def __init__(self) -> None:
        self._told: dict[int, WorkerLoad] = {}
        self._gone_pushes, self._gone_cpu = 0, 0.0

    def told(self, client: int, frame: WorkerLoad) -> None:
        """Worker ``client`` says what it holds now.

        Raises:
            InvalidView: a box that is no region's text (the last report stands).
        """
        for text in frame.boxes.values():
            parse_region(text)  # read again at a split: refused now, not then
        self._told[client] = frame

    def gone(self, client: int) -> None:
        """Worker ``client``'s connection ended: what it last told counts as gone."""
        frame = self._told.pop(client, None)
        if frame is not None:
            self._gone_pushes += frame.pushes
            self._gone_cpu += frame.cpu

    def _of(self, side: float) -> list[WorkerLoad]:
        """What the workers told of the map's grid of ``side`` (one told before it knew the
        map is counted from its next report)."""
        return [frame for frame in self._told.values() if frame.side == side]

    def weights(self, side: float) -> dict[str, float]:
        total: dict[str, float] = {}
        for frame in self._of(side):
            for part, count in frame.parts.items():
                total[part] = total.get(part, 0.0) + count
        return total

    def warm(self, parts: Iterable[str], side: float) -> dict[str, str]:
        return handover.merged_warm(((f.parts, f.boxes) for f in self._of(side)), parts)

    def figures(self) -> tuple[int, float, float]:
        told = list(self._told.values())
        held = sum(frame.subscriptions for frame in told)
        pushes = self._gone_pushes + sum(frame.pushes for frame in told)
        cpu = time.process_time() + self._gone_cpu + sum(frame.cpu for frame in told)
        return held, float(pushes), cpu
