"""The world of the relay benchmarks: entities moving in a square, a scripted publisher ticking
them to a relay, and the routes subscribers' box views move along.

``bench/relay.py`` measures one relay with it, ``bench/relaycore.py`` its core alone and
``bench/mqttspatial.py`` the MQTT front end: the same load, so that their numbers compare.

- ``Entities``: ``count`` entities moving in straight lines at ``ENTITY_SPEED``, bouncing off
  the walls of a ``WORLD`` x ``WORLD`` square (a fraction of them only: ``moving``, the rest
  still, for a mostly idle world).
- ``World`` and ``publisher_main``: a ``ScriptedPublisher`` sending one batch per tick
  (``TICK_RATE``) with the rows inside the relay's primitives, in this process or in one of its
  own that a coordinator drives through a pipe (``control``).
- ``Route`` and ``routes``: a ``VIEW_SIDE`` box view moving at ``VIEW_SPEED``, one step every
  ``MOVE_EVERY`` seconds; subscribers of one group share theirs.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import numpy.typing as npt

from fanout.testing import cpu
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.views import Box
from fanout.wire.messages import Acquire, Catalog, DatasetInfo, Frame, Release

#: The side of the square world.
WORLD = 4000.0
#: Ticks the publisher sends a second.
TICK_RATE = 10.0
#: Units an entity moves a second.
ENTITY_SPEED = 20.0
#: The side of a subscriber's box view (about 100 entities inside).
VIEW_SIDE = 125.0
#: Units a view moves a second.
VIEW_SPEED = 20.0
#: Seconds between two moves of a view.
MOVE_EVERY = 1.0
#: The publisher's raster for aligned (tile) primitives.
COVERAGE_CELL = 32.0
AGENTS = DatasetInfo(
    "agents",
    "id",
    {"id": "<i8", "x": "<f8", "y": "<f8", "kind": "<i4", "tick": "<i8", "ts": "<f8"},
    "space",
    ["x", "y"],
)


class Entities:
    """Entities moving in straight lines at constant speed, bouncing off the world's walls."""

    def __init__(self, count: int, seed: int = 7, moving: float = 1.0) -> None:
        rng = np.random.default_rng(seed)
        self.ids = np.arange(count, dtype=np.int64)
        self.xy = rng.uniform(0, WORLD, (2, count))
        angle = rng.uniform(0, 2 * math.pi, count)
        self.velocity = ENTITY_SPEED * np.stack([np.cos(angle), np.sin(angle)])
        #: Which entities move (the first ``moving`` fraction; the others stay where they are).
        self.moving = self.ids < round(moving * count)
        self.velocity[:, ~self.moving] = 0.0
        self.kind = (self.ids % 7).astype(np.int32)

    def step(self, seconds: float) -> None:
        """Move every entity ``seconds`` along."""
        self.xy += self.velocity * seconds
        low, high = self.xy < 0, self.xy > WORLD
        self.xy[low] = -self.xy[low]
        self.xy[high] = 2 * WORLD - self.xy[high]
        self.velocity[low | high] *= -1


class Coverage:
    """Which entities lie inside the relay's primitives (tile primitives are rasterised)."""

    def __init__(self) -> None:
        self.side = math.ceil(WORLD / COVERAGE_CELL) + 1
        self.counts = np.zeros((self.side, self.side), dtype=np.int32)
        self.prims: dict[int, Any] = {}
        self.loose: dict[int, Any] = {}  # primitives not aligned to the raster: exact match

    def _cells(self, box: Any) -> tuple[slice, slice] | None:
        edges = [v / COVERAGE_CELL for v in (*box.lo, *box.hi)]
        if any(e != int(e) for e in edges):
            return None
        x0, y0, x1, y1 = (min(max(int(e), 0), self.side) for e in edges)
        return slice(x0, x1), slice(y0, y1)

    def add(self, prim: int, box: Any) -> None:
        self.prims[prim] = box
        cells = self._cells(box)
        if cells is None:
            self.loose[prim] = box
        else:
            self.counts[cells] += 1

    def remove(self, prim: int) -> None:
        box = self.prims.pop(prim, None)
        if box is None:
            return
        cells = self._cells(box)
        if cells is None:
            del self.loose[prim]
        else:
            self.counts[cells] -= 1

    def inside(
        self, xy: npt.NDArray[np.float64], prims: list[int] | None = None
    ) -> npt.NDArray[np.bool_]:
        """Which of the entities at ``xy`` (2 x N) lie in a primitive (in ``prims``, if
        given)."""
        mask: npt.NDArray[np.bool_]
        if prims is not None:  # only these primitives
            mask = np.zeros(xy.shape[1], dtype=bool)
            for prim in prims:
                if prim in self.prims:
                    mask |= self.prims[prim].match(xy[0], xy[1])
            return mask
        cells = np.clip((xy / COVERAGE_CELL).astype(np.int64), 0, self.side - 1)
        mask = self.counts[cells[0], cells[1]] > 0
        for box in self.loose.values():
            mask |= box.match(xy[0], xy[1])
        return mask


class World:
    """The publisher's side of a trial: moving entities, served by a scripted publisher
    (``fanout.testing.publisher``) that feeds the relay's acquires and releases to the coverage
    raster and sends one batch per tick."""

    def __init__(self, entities: int, moving: float = 1.0) -> None:
        self.entities = Entities(entities, moving=moving)
        self.coverage = Coverage()
        self.publisher = ScriptedPublisher(
            Catalog([AGENTS]), name="bench-publisher", on_frame=self._track
        )
        self.sent: list[tuple[int, float]] = []

    def _track(self, frame: Frame) -> None:
        if isinstance(frame, Acquire):
            self.coverage.add(frame.prim, frame.view)
        elif isinstance(frame, Release):
            self.coverage.remove(frame.prim)

    async def ticks(self) -> None:
        period = 1.0 / TICK_RATE
        next_tick = time.monotonic()
        previous = np.zeros(len(self.entities.ids), dtype=bool)
        while True:
            next_tick += period
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            if not self.publisher.relays:
                continue
            entities = self.entities
            entities.step(period)
            inside = self.coverage.inside(entities.xy)
            snapshots = self.publisher.take_fresh()
            sent = inside & entities.moving  # the rows that moved, and fresh primitives' rows
            if snapshots:
                sent |= self.coverage.inside(entities.xy, snapshots)
            at = np.flatnonzero(sent)
            seq, now = self.publisher.next_seq.get("agents", 0), time.time()
            rows = {
                "id": entities.ids[at],
                "x": entities.xy[0, at],
                "y": entities.xy[1, at],
                "kind": entities.kind[at],
                "tick": np.full(len(at), seq, dtype=np.int64),
                "ts": np.full(len(at), now),
            }
            gone = entities.ids[previous & ~inside]
            batch = await self.publisher.send(
                rows, deletes=gone, snapshots=snapshots, tick_time=now
            )
            previous = inside
            if self.publisher.relays:  # else the relay is gone: the trial says so
                self.sent.append((batch.seq, now))


def publisher_main(conn: Connection, entities: int, moving: float = 1.0) -> None:
    """The publisher process: serve, tick (``moving``: the fraction of entities that move),
    answer the coordinator."""

    async def main() -> None:
        world = World(entities, moving)
        async with serving(world.publisher) as url:
            conn.send(url)
            async with asyncio.TaskGroup() as group:
                ticking = group.create_task(world.ticks())
                await control(conn, lambda: {"sent": world.sent})
                ticking.cancel()

    asyncio.run(main())


async def control(conn: Connection, report: Any) -> None:
    """Answer the coordinator: ``cpu`` samples, ``report`` sends ``report()``, ``stop`` ends."""
    loop = asyncio.get_running_loop()
    while True:
        request = await loop.run_in_executor(None, conn.recv)
        if request == "cpu":
            conn.send(cpu.this_process())
        elif request == "report":
            conn.send(report())
        else:
            return


@dataclass
class Route:
    """A view's centre moving at constant speed, bouncing inside the world.

    The view moves in steps, at ``offset + k * MOVE_EVERY`` seconds into the trial, so that
    subscribers sharing a route hold equal views.
    """

    x: float
    y: float
    vx: float
    vy: float
    offset: float = 0.0

    def step(self, seconds: float) -> int:
        """The last step at or before ``seconds`` into the trial."""
        return math.floor((seconds - self.offset) / MOVE_EVERY)

    def box(self, step: int) -> Any:
        """The view at ``step``."""

        seconds = self.offset + step * MOVE_EVERY
        half, span = VIEW_SIDE / 2, WORLD - VIEW_SIDE

        def fold(start: float, velocity: float) -> float:
            travelled = (start - half + velocity * seconds) % (2 * span)
            return half + (travelled if travelled <= span else 2 * span - travelled)

        x, y = fold(self.x, self.vx), fold(self.y, self.vy)
        return Box((x - half, y - half), (x + half, y + half))


def routes(count: int, group: int, seed: int) -> list[Route]:
    """One route per subscriber; the subscribers of one group share theirs."""
    rng = np.random.default_rng(seed)
    shared: list[Route] = []
    distinct = math.ceil(count / group)
    for index in range(distinct):
        angle = rng.uniform(0, 2 * math.pi)
        shared.append(
            Route(
                float(rng.uniform(VIEW_SIDE, WORLD - VIEW_SIDE)),
                float(rng.uniform(VIEW_SIDE, WORLD - VIEW_SIDE)),
                VIEW_SPEED * math.cos(angle),
                VIEW_SPEED * math.sin(angle),
                offset=MOVE_EVERY * index / distinct,  # moves spread evenly over each second
            )
        )
    return [shared[i // group] for i in range(count)]
