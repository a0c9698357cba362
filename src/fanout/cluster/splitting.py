"""Split and merge on load, the asyncio side: a relay of a map samples its load every second,
asks ``cluster.balance`` what to do, and carries it out through the map's assignments
(``cluster.registry`` rule 6; docs/cluster.md, "Split and merge on load"). Rules:

1. **Samples** every ``EVERY`` s (subscriptions, pushes and no-updates a second, CPU share, rows),
   the last ``dwell`` seconds kept; forward policy: the subscriptions of its own parts only.
2. **Parts** are weighed by their subscriptions (forward policy: also relays below's primitives);
   the core's (``Holdings``), or at a relay's leader its workers' (``relay.shell.workermap``).
3. **Where a split goes:** the first idle standby (forward policy: the first named after this
   relay); with none, ``--split-command`` is run with a fresh name and awaited ``--split-wait``
   seconds, else the split fails and is tried after a dwell.
4. **Parts received count as a move** (``balance`` rule 3), and so does a handover under way.
5. **Carried out** by assigning or unassigning parts; refusals and Redis errors are logged,
   counted and tried again after a dwell. A split's parts are handed warm (``handover``;
   redirect policy: the forward policy moves no subscriber).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shlex
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from fanout import cancelling
from fanout.cluster import handover
from fanout.cluster.balance import Load, Merge, Split, Thresholds, decide
from fanout.cluster.redirects import moved
from fanout.cluster.registry import REDIS_FAILURES, HandOverRefused, Registry
from fanout.cluster.responsibility import ResponsibilityMap, part_of, taken_from
from fanout.metrics import Sample
from fanout.views import View
from fanout.wire.messages import Error, WorkerLoad

if TYPE_CHECKING:
    from fanout.relay.core.relaycore import RelayCore

log = logging.getLogger(__name__)

#: Seconds between two samples of the relay's load.
EVERY = 1.0


class Balancer:
    """One relay's splits and merges."""

    def __init__(
        self,
        core: RelayCore,
        registry: Registry,
        thresholds: Thresholds,
        *,
        command: str | None = None,
        wait: float = 30.0,
        forward: bool = False,
    ) -> None:
        """Args:
        core: the relay's core (its subscriptions and counters are read).
        registry: the map (its assignments are written).
        thresholds: when to split and merge.
        command: the ``--split-command`` (rule 3), None: split only to idle standbys.
        wait: seconds to wait for the relay ``command`` started to join.
        forward: the relay forwards (``--registry-policy forward``): rules 1 and 2 count what
            it is responsible for, relays below included.
        """
        self._core, self._registry, self.thresholds = core, registry, thresholds
        self._command, self._wait, self._forward = command, wait, forward
        #: What it weighs: the core's subscriptions; a relay's leader: its workers' (rule 2).
        self.holdings: Holdings = CoreHoldings(core, forward)
        self._samples: deque[Load] = deque(maxlen=int(thresholds.dwell / EVERY) + 2)
        self._last: tuple[float, float, float] | None = None  # (wall, cpu, pushes) at last sample
        self._last_move: float | None = None
        self._received: set[str] = set()
        self._unready: dict[str, float] = {}  # part -> since when (``handover.unready``)
        self._started = itertools.count(1)
        #: The relays ``command`` started (rule 3: the relay never stops them).
        self.started: list[asyncio.subprocess.Process] = []
        self.splits = self.merges = self.failures = 0
        self.load = Load(0.0)

    async def run(self) -> None:
        """Sample and act until cancelled (rules 1-5)."""
        while True:
            cancelling.check()  # a cancel the Redis client swallowed (assignments)
            await asyncio.sleep(EVERY)
            parts = self.parts()
            self.sample(time.monotonic(), parts)
            await self.act(parts)

    def sample(self, now: float, parts: dict[str, float]) -> Load:
        """Take a sample of the relay's load at ``now`` (rule 1), ``parts`` as ``parts()``
        weighs them now."""
        held, pushes, cpu = self.holdings.figures()
        rate = share = 0.0
        if self._last is not None and now > self._last[0]:
            elapsed = now - self._last[0]
            share, rate = (cpu - self._last[1]) / elapsed, (pushes - self._last[2]) / elapsed
        self._last = (now, cpu, pushes)
        rows = sum(len(state.buffer.active) for state in self._core.datasets.values())
        subscribers = sum(parts.values()) if self._forward else held
        self.load = Load(now, subscribers, rate, share, rows)
        self._samples.append(self.load)
        return self.load

    def parts(self) -> dict[str, float]:
        """The parts this relay holds subscriptions of and is responsible for, weighed by their
        subscriptions (rule 2; under the forward policy, relays' below primitives too)."""
        table = self._registry.map
        return owned(table, self._registry.name, self.holdings.weights(table.side))

    async def act(self, parts: dict[str, float]) -> None:
        """Split or merge if the thresholds say so (rules 3-5), ``parts`` as ``parts()``
        weighs them now."""
        received = self._registry.map.received(self._registry.name)
        if set(received) - self._received:
            # Parts handed here count as a move: their subscribers are still arriving, so the
            # relay's load says nothing yet about whether to hand them back.
            self._last_move = self.load.at
        self._received = set(received)
        now, me = self.load.at, self._registry.name
        self._unready = handover.unready(self._registry.map, me, now, self._unready)
        if any(now - since < handover.WAIT for since in self._unready.values()):
            self._last_move = now  # a handover under way (``handover`` rule 4)
            return
        decision = decide(self.thresholds, list(self._samples), parts, received, self._last_move)
        if decision is None:
            return
        self._last_move = self.load.at  # whatever follows, not again before a dwell
        try:
            if isinstance(decision, Split):
                await self._split(decision, parts)
            elif isinstance(decision, Merge):
                await self._merge(decision)
        except (HandOverRefused, *REDIS_FAILURES, OSError) as error:
            self.failures += 1
            log.warning("split or merge failed, trying again after a dwell: %s", error)

    async def _split(self, split: Split, parts: dict[str, float]) -> None:
        target = await self._target()
        if target is None:
            self.failures += 1
            return
        side = self._registry.map.side
        warm = {} if self._forward else self.holdings.warm(split.parts, side)
        await self._registry.assign(target, list(split.parts), warm)
        self.splits += 1
        moving = sum(parts[part] for part in split.parts)
        log.info(
            "split: %s handed %d of its %d parts (%d subscriptions) to %s; load was %s",
            self._registry.name,
            len(split.parts),
            len(parts),
            moving,
            target,
            self.load,
        )

    async def _merge(self, merge: Merge) -> None:
        count = await self._registry.unassign(list(merge.parts))
        self.merges += 1
        log.info(
            "merge: %s handed back the %d parts it received; load was %s",
            self._registry.name,
            count,
            self.load,
        )

    async def _target(self) -> str | None:
        """An idle standby, started by the split command if need be (rule 3); None if none."""
        me = self._registry.name
        idle = [
            name
            for name in self._registry.map.idle_standbys(but=me)
            if not self._forward or name > me
        ]
        if idle:
            return idle[0]
        if self._command is None:
            log.warning(
                "split: %s is past its thresholds (%s) but no standby relay is idle%s and no"
                " --split-command is given; start one with --standby",
                me,
                self.load,
                " (named after it, as the forward policy needs)" if self._forward else "",
            )
            return None
        name = f"{self._registry.name}-split-{next(self._started)}"
        command = self._command.replace("{name}", shlex.quote(name))
        log.info("split: starting a relay to hand parts to: %s", command)
        # A session of its own: the relay started outlives this one, and its process group
        # (the shell and the relay) can be stopped together.
        self.started.append(await asyncio.create_subprocess_shell(command, start_new_session=True))
        deadline = time.monotonic() + self._wait
        while time.monotonic() < deadline:
            await self._registry.beat()
            if name in self._registry.map.idle_standbys():
                return name
            await asyncio.sleep(min(0.5, self._registry.lease / 3))
        log.error(
            "split: the relay started by --split-command (%r) did not join the map as a"
            " standby named %s within %g s; not splitting. Does it pass --standby --name"
            " {name} and the same --registry?",
            command,
            name,
            self._wait,
        )
        return None

    def samples(self) -> list[Sample]:
        """The balancer's figures for ``GET /metrics``."""
        return [
            Sample(
                "relay_splits", "counter", "Splits: parts handed to another relay.", self.splits
            ),
            Sample("relay_merges", "counter", "Merges: received parts handed back.", self.merges),
            Sample(
                "relay_split_failures",
                "counter",
                "Splits and merges that could not be carried out (no target, map changed,"
                " Redis away).",
                self.failures,
            ),
            Sample(
                "relay_parts_received",
                "gauge",
                "Parts other relays handed to this one.",
                len(self._registry.map.received(self._registry.name)),
            ),
            Sample(
                "relay_load_subscribers",
                "gauge",
                "Subscriptions as the balancer counts them, last second (forward policy: of the"
                " parts this relay is responsible for, relays' below primitives included).",
                self.load.subscribers,
            ),
            Sample("relay_load_cpu", "gauge", "Share of a core used, last second.", self.load.cpu),
            Sample(
                "relay_load_pushes",
                "gauge",
                "Pushes and no-updates sent a second, last second.",
                self.load.pushes,
            ),
        ]


def responsible(
    table: ResponsibilityMap,
    me: str,
    held: Iterable[tuple[str, View]],
    pinned: Mapping[str, Mapping[View, int]],
) -> dict[str, float]:
    """The parts relay ``me`` is responsible for in ``table`` among those of ``held``
    subscriptions and ``pinned`` primitives (dataset -> view -> how many relays below hold it),
    each weighed by how many of them it holds (rule 2); {} if the map has no member."""
    return owned(table, me, weighed(held, pinned, table.side))


def weighed(
    held: Iterable[tuple[str, View]], pinned: Mapping[str, Mapping[View, int]], side: float
) -> dict[str, float]:
    """Part (of the grid of ``side``) -> how many of ``held`` and ``pinned`` it holds."""
    weights: dict[str, float] = {}
    for dataset, view in held:
        part = part_of(dataset, view, side)
        weights[part] = weights.get(part, 0.0) + 1.0
    for dataset, views in pinned.items():
        for view, count in views.items():
            part = part_of(dataset, view, side)
            weights[part] = weights.get(part, 0.0) + count
    return weights


def owned(table: ResponsibilityMap, me: str, weights: Mapping[str, float]) -> dict[str, float]:
    """Of ``weights``, the parts relay ``me`` is responsible for in ``table`` ({} if the map
    has no member). Owners once per part, not per subscription: a relay holds many of each."""
    if not table.members:
        return {}
    return {part: load for part, load in weights.items() if table.owner(part).name == me}


class Holdings(Protocol):
    """What a balancer weighs (rules 1, 2 and 6)."""

    def weights(self, side: float) -> dict[str, float]:
        """Part (of the grid of ``side``) -> the subscriptions held of it (forward policy:
        relays' below primitives too)."""
        ...

    def warm(self, parts: Iterable[str], side: float) -> dict[str, str]:
        """What the member a split hands ``parts`` to warms (``handover.warm``)."""
        ...

    def figures(self) -> tuple[int, float, float]:
        """Subscriptions held, pushes and no-updates sent, CPU seconds used: so far."""
        ...


class CoreHoldings:
    """A relay process's own subscriptions and counters (``Holdings``)."""

    def __init__(self, core: RelayCore, forward: bool = False) -> None:
        self._core, self._forward = core, forward

    def weights(self, side: float) -> dict[str, float]:
        held = [(s.dataset, s.view) for s in self._core.downstream]
        return weighed(held, self._core.downstream.pinned if self._forward else {}, side)

    def warm(self, parts: Iterable[str], side: float) -> dict[str, str]:
        return handover.warm([(s.dataset, s.view) for s in self._core.downstream], parts, side)

    def figures(self) -> tuple[int, float, float]:
        core = self._core
        return len(core.downstream), float(core.pushes_sent), time.process_time()

    def told(self, side: float) -> WorkerLoad:
        """What a relay's worker tells its leader of these holdings (``relay.shell.worker``)."""
        weights = self.weights(side)
        held, pushes, cpu = self.figures()
        parts = {part: int(count) for part, count in weights.items()}
        return WorkerLoad(side, parts, self.warm(weights, side), held, int(pushes), cpu)


def moved_subscriptions(
    core: RelayCore, before: ResponsibilityMap, after: ResponsibilityMap, me: str
) -> list[tuple[int, Error]]:
    """The held subscriptions of relay ``me`` whose part went elsewhere (a split, a merge, a
    relay joining) when the map changed from ``before`` to ``after`` (rule 5), each as (client,
    the redirect ending it), in the core's order."""
    ended: list[tuple[int, Error]] = []
    if (before.members.keys(), before.standby, dict(before.assigned)) == (
        after.members.keys(),
        after.standby,
        dict(after.assigned),
    ):
        return ended  # the same owners
    decided: dict[str, bool] = {}  # part -> moved, once per part
    for held in core.downstream:
        part = part_of(held.dataset, held.view, after.side)
        if part not in decided:
            decided[part] = taken_from(before, after, me, part)
        if decided[part]:
            error = moved(before, after, me, dataset=held.dataset, view=held.view, sub=held.sub)
            assert error is not None, "taken_from said the part moved"
            ended.append((held.client, error))
    return ended
