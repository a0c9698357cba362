"""The spatial MQTT benchmark's pure parts (``bench/mqttspatial.py`` runs them): the subscribers'
boxes, the per-cell topics and rows, counting the rows inside a box, judging a trial, and the
search for the most subscribers a broker holds.

The world is ``fanout.testing.world``'s; it is cut into ``CELL`` x ``CELL`` cells, one MQTT topic
each (``cells/<cx>/<cy>``), whose messages carry a ``HEADER`` (tick, send time) and then rows of
``ROW`` (id, x, y). A trial is ``invalid`` when a process of the benchmark's own (a client
process, a publisher) used more than ``OWN_CORES_MAX`` cores: it, not the broker, may have been
the limit, so the search stops there and says so.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fanout.testing.world import VIEW_SIDE, WORLD

#: The side of a cell (a view's side: a box overlaps up to four cells).
CELL = VIEW_SIDE
#: Cells along a side of the world.
CELLS = math.ceil(WORLD / CELL)
#: A cell message's header: the tick and its send time (``time.time()``).
HEADER = struct.Struct("<qd")
#: A cell message's row.
ROW = np.dtype([("id", "<i8"), ("x", "<f4"), ("y", "<f4")])
#: A trial holds 10 Hz when every subscriber got at least this fraction of the ticks...
TARGET_DELIVERED = 0.95
#: ... and the 99th percentile of tick-send-to-receipt is at most this.
TARGET_P99_MS = 100.0
#: Cores a process of the benchmark's own may use before the trial is not the broker's.
OWN_CORES_MAX = 0.8

Box = tuple[float, float, float, float]
Verdict = Literal["pass", "fail", "invalid"]


def boxes(count: int, seed: int) -> list[Box]:
    """``count`` ``VIEW_SIDE`` boxes (x0, y0, x1, y1) at uniformly random places."""
    corners = np.random.default_rng(seed).uniform(0, WORLD - VIEW_SIDE, (count, 2))
    return [(float(x), float(y), float(x) + VIEW_SIDE, float(y) + VIEW_SIDE) for x, y in corners]


def cells_of(box: Box) -> list[str]:
    """The topics of the cells ``box`` overlaps (a box's upper edges are open)."""
    x0, y0, x1, y1 = box
    xs = range(int(x0 // CELL), min(math.ceil(x1 / CELL), CELLS))
    ys = range(int(y0 // CELL), min(math.ceil(y1 / CELL), CELLS))
    return [f"cells/{cx}/{cy}" for cx in xs for cy in ys]


def useful_rows(box: Box, x: npt.ArrayLike, y: npt.ArrayLike) -> int:
    """How many of the rows at (``x``, ``y``) lie inside ``box`` (lower edges in, upper out)."""
    x0, y0, x1, y1 = box
    xs, ys = np.asarray(x), np.asarray(y)
    return int(np.count_nonzero((xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)))


def cell_rows(
    ids: npt.NDArray[np.int64], xy: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.void]]:
    """The rows sorted by cell (cell ``cx * CELLS + cy``) and each cell's bounds in them: cell
    n's rows are ``rows[bounds[n]:bounds[n + 1]]``. ``xy`` is 2 x N; points outside the world
    go to its edge cells."""
    cx = np.clip((xy[0] // CELL).astype(np.int64), 0, CELLS - 1)
    cy = np.clip((xy[1] // CELL).astype(np.int64), 0, CELLS - 1)
    cell = cx * CELLS + cy
    order = np.argsort(cell, kind="stable")
    rows = np.empty(len(ids), ROW)
    rows["id"], rows["x"], rows["y"] = ids[order], xy[0, order], xy[1, order]
    bounds = np.searchsorted(cell[order], np.arange(CELLS * CELLS + 1)).astype(np.uint32)
    return bounds, rows


def tick_block(
    tick: int, sent: float, ids: npt.NDArray[np.int64], xy: npt.NDArray[np.float64]
) -> bytes:
    """One tick as ``mqttload publish`` reads it (``bench/mqttload.c``): the row count, the
    ``HEADER``, the cells' bounds (``cell_rows``) and the rows sorted by cell."""
    bounds, rows = cell_rows(ids, xy)
    head = len(rows).to_bytes(4, "little") + HEADER.pack(tick, sent)
    return head + bounds.tobytes() + rows.tobytes()


def judge(delivered_min: float, p99_ms: float, own_cores: list[float], lost: int) -> Verdict:
    """A trial's verdict: ``invalid`` if a process of the benchmark's own used more than
    ``OWN_CORES_MAX`` cores, else ``pass`` if every subscriber held 10 Hz, none lost its
    connection and p99 <= ``TARGET_P99_MS``, else ``fail``."""
    if any(cores > OWN_CORES_MAX for cores in own_cores):
        return "invalid"
    held = delivered_min >= TARGET_DELIVERED and p99_ms <= TARGET_P99_MS and lost == 0
    return "pass" if held else "fail"


@dataclass
class Search:
    """The most subscribers that pass: N doubles from ``start`` until a trial fails, then the
    gap is bisected ``bisections`` times. An invalid trial ends the search; before any valid
    trial failed, ``best`` is then only a lower bound (``bound`` says ``clients``). ``bound`` is
    ``broker`` once a valid trial failed, ``limit`` if every N up to ``limit`` passed."""

    start: int
    limit: int
    bisections: int = 2
    best: int = 0
    bound: Literal["broker", "clients", "limit"] = "limit"
    failed: int | None = None
    bisected: int = 0
    tried: list[tuple[int, Verdict]] = field(default_factory=list)

    def next(self) -> int | None:
        """The next N to try, None when the search is over."""
        if self.tried and self.tried[-1][1] == "invalid":
            return None
        if self.failed is None:
            n = self.best * 2 if self.tried else self.start
            return n if n <= self.limit else None
        if self.bisected >= self.bisections or self.failed - self.best <= 1:
            return None
        return (self.best + self.failed) // 2

    def record(self, n: int, verdict: Verdict) -> None:
        """What the trial at ``n`` gave."""
        if self.failed is not None:
            self.bisected += 1
        self.tried.append((n, verdict))
        if verdict == "pass":
            self.best = max(self.best, n)
        elif verdict == "fail":
            self.failed = n if self.failed is None else min(self.failed, n)
            self.bound = "broker"
        elif self.failed is None:  # else a valid trial above already failed: the broker's bound
            self.bound = "clients"
