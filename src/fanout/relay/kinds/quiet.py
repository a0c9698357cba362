"""Which box views saw no row change between two states: those are not cut (a ``NoUpdate``).

Rows are counted in the cells of a grid fixed once (with a band of cells on each side for
rows beyond it, and one bucket for rows without finite coordinates). Between a state and the
next, a cell is **changed** when it holds a row written since the earlier state's seq, or its
count of rows differs. A cell that is not changed holds the same rows, unchanged: each row in
it now was not written since, so it lay in that cell then, and the counts are equal. A box
whose cells are all unchanged therefore holds the same rows with the same values: its push
would enter, update and leave nothing. The summary is of one pair of states: a view held as of
the earlier one may use it (``QuietCells.since``). Counting is a pass over the rows a state:
where it finds nothing quiet it pauses (``QuietViews``).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Hashable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from fanout.relay.core.downstream import Subscription
from fanout.relay.data.buffers import DoubleBuffer
from fanout.views.region import Box

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

#: Rows per cell the fixed grid aims for when it is laid out (a finer grid tells more views
#: apart, but costs more to count per state).
PER_CELL = 4
#: Cells per axis at most.
MOST_CELLS = 256
#: States at most between two counts of a dataset's rows in which no view asked was quiet.
BACKOFF = 32
#: Boxes whose corner cells ``QuietCells.quiet_boxes`` keeps (all forgotten when more come).
CACHED = 1 << 16


class QuietViews:
    """Which due box views of one dataset are quiet (their ``QuietCells``), counting the rows
    of each state only while that pays."""

    def __init__(self) -> None:
        self.cells = QuietCells()
        self._count_from = 0  # the generation from which to count again (``_back_off``)
        self._pause = 1

    def of(self, due: Sequence[tuple[Subscription, Hashable]], buffer: DoubleBuffer) -> list[bool]:
        """Which of the due box views (each with the box it is cut from) hold the rows of the
        state before this one, in which no row changed inside them since: their push is a
        ``NoUpdate``."""
        cells, stamp = self.cells, buffer.stamp
        if stamp is None or buffer.generation < self._count_from:
            return [False] * len(due)
        position = (stamp.epoch, stamp.seq)
        cells.advance(buffer.generation, position, buffer.index.columns, buffer.active.changed)
        since = cells.since
        if since is None:
            return [False] * len(due)
        asked = [
            at
            for at, (subscription, located) in enumerate(due)
            if (held := subscription.held) is not None
            and (held.generation, held.seq) == since
            and held.epoch == stamp.epoch
            and not held.refresh
            and held.stale is None
            and held.anchor is None
            and located == subscription.view == held.view
        ]
        quiet = [False] * len(due)
        if asked:
            views = [cast(Box, due[at][1]) for at in asked]
            for at, still in zip(asked, cells.quiet_boxes(views).tolist(), strict=True):
                quiet[at] = still
            self._back_off(any(quiet), buffer.generation)
        return quiet

    def _back_off(self, paid: bool, generation: int) -> None:
        """Counting costs a pass over the rows each state: where no view asked was quiet (every
        cell changes, as in a world where everything moves), count again only after 2, 4, ...
        up to ``BACKOFF`` states (views are cut meanwhile)."""
        if paid:
            self._pause = 1
            return
        self._count_from = generation + self._pause
        self._pause = min(2 * self._pause, BACKOFF)


class QuietCells:
    """Changed cells between the last two states ``advance`` saw.

    Attributes:
        since: the (generation, seq) of the earlier state (None: no pair yet): a view held as
            of it may ask ``quiet``.
    """

    def __init__(self) -> None:
        self.since: tuple[int, int] | None = None
        self._last: tuple[int, int] | None = None
        self._epoch = 0
        self._lo: Floats | None = None
        self._inverse: Floats | None = None  # 1 / a cell's side, per axis
        self._cells = 0
        self._counts: npt.NDArray[np.int64] | None = None
        self._table: npt.NDArray[np.int64] | None = None  # changed cells' summed-area table
        #: Each box's corners in the flattened table, for ``quiet_boxes`` (the grid is fixed).
        self._corners: dict[Box, list[int]] = {}
        self._signs: npt.NDArray[np.int64] | None = None  # each corner's sign in the sum

    def advance(
        self,
        generation: int,
        at: tuple[int, int],
        columns: Sequence[Floats],
        changed: npt.NDArray[np.int64],
    ) -> None:
        """Count the state ``generation`` (at ``at``: its epoch and seq): its rows' coordinates
        ``columns`` and the seq each row was last written at. A repeated generation changes
        nothing; a new epoch starts the pairs again (its seqs start again)."""
        if self._last is not None and self._last[0] == generation:
            return
        epoch, seq = at
        if self._lo is None:
            self._lay_out(columns)
        cell = self._cell_of_rows(columns)
        counts = np.bincount(cell, minlength=self._buckets())
        if self._last is None or self._counts is None or epoch != self._epoch:
            self.since = None  # no earlier state, or seqs started again (a new epoch)
        else:
            touched = np.bincount(cell[changed > self._last[1]], minlength=len(counts))
            dirty = (counts != self._counts) | (touched > 0)
            self._table = _summed(dirty[:-1].reshape((self._cells,) * len(columns)))
            self.since = self._last
        self._counts, self._last, self._epoch = counts, (generation, seq), epoch

    def quiet(self, lo: Floats, hi: Floats) -> Mask:
        """For boxes (``lo``, ``hi``: one row per box, one column per axis), whether no cell
        they touch changed since ``since`` (all False without a pair of states)."""
        if self.since is None or self._table is None:
            return np.zeros(len(lo), dtype=bool)
        first, last = self._cell_of_points(lo), self._cell_of_points(hi) + 1
        table, dims = self._table, lo.shape[1]
        total = np.zeros(len(lo), dtype=np.int64)
        for corner in itertools.product((0, 1), repeat=dims):
            index = tuple(last[:, a] if c else first[:, a] for a, c in enumerate(corner))
            sign = -1 if (dims - sum(corner)) % 2 else 1
            total += sign * table[index]
        quiet: Mask = total == 0
        return quiet

    def quiet_boxes(self, boxes: Sequence[Box]) -> Mask:
        """``quiet`` for boxes, their corner cells remembered from turn to turn (a box's
        cells depend only on the box: the grid is laid out once)."""
        if self.since is None or self._table is None or not boxes:
            return np.zeros(len(boxes), dtype=bool)
        corners, table = self._corners, self._table
        missing = [box for box in dict.fromkeys(boxes) if box not in corners]
        if missing and len(corners) + len(missing) > CACHED:
            corners.clear()
            missing = list(dict.fromkeys(boxes))
        if missing:
            lo = np.array([box.lo for box in missing], dtype=np.float64)
            hi = np.array([box.hi for box in missing], dtype=np.float64)
            flat = self._flat_corners(lo, hi, table.shape).tolist()
            corners.update(zip(missing, flat, strict=True))
        assert self._signs is not None
        index = np.array([corners[box] for box in boxes], dtype=np.int64)
        total = table.ravel()[index.reshape(len(boxes), -1)] @ self._signs
        quiet: Mask = total == 0
        return quiet

    def _flat_corners(
        self, lo: Floats, hi: Floats, shape: tuple[int, ...]
    ) -> npt.NDArray[np.int64]:
        """Each box's corners (one row per box) as indices into the flattened summed-area
        table, in the order of ``itertools.product``; their signs in ``_signs``."""
        first, last = self._cell_of_points(lo), self._cell_of_points(hi) + 1
        dims = lo.shape[1]
        flat, signs = [], []
        for corner in itertools.product((0, 1), repeat=dims):
            index = tuple(last[:, a] if c else first[:, a] for a, c in enumerate(corner))
            flat.append(np.ravel_multi_index(index, shape))
            signs.append(-1 if (dims - sum(corner)) % 2 else 1)
        self._signs = np.array(signs, dtype=np.int64)
        return np.stack(flat, axis=1).astype(np.int64)

    def _lay_out(self, columns: Sequence[Floats]) -> None:
        dims, rows = len(columns), len(columns[0])
        finite = np.ones(rows, dtype=bool)
        for column in columns:
            finite &= np.isfinite(column)
        count = int(finite.sum())
        inner = max(1, math.ceil((count / PER_CELL) ** (1 / dims))) if count else 1
        inner = min(inner, MOST_CELLS - 2)
        lo = [float(c[finite].min()) if count else 0.0 for c in columns]
        hi = [float(c[finite].max()) if count else 1.0 for c in columns]
        self._lo = np.array(lo)
        sides = [_side(low, high, inner) for low, high in zip(lo, hi, strict=True)]
        self._inverse = np.array([1.0 / side for side in sides])
        self._cells = inner + 2  # a band of cells on each side holds rows beyond the grid

    def _buckets(self) -> int:
        dims = 0 if self._lo is None else len(self._lo)
        return int(self._cells**dims) + 1

    def _axis(self, values: Floats, axis: int) -> npt.NDArray[np.int64]:
        """Cells along ``axis``, 0 and the last for beyond the grid; the same monotonic formula
        for rows and box corners, so a box touches the cell of every point inside it (NaN:
        any cell, the caller's to ignore)."""
        assert self._lo is not None and self._inverse is not None
        with np.errstate(invalid="ignore", over="ignore"):
            raw = values - self._lo[axis]
            raw *= self._inverse[axis]
            raw += 1.0
            np.maximum(raw, 0.0, out=raw)
            np.minimum(raw, self._cells - 1.0, out=raw)
            cells: npt.NDArray[np.int64] = raw.astype(np.int64)  # truncation: floor here
        return cells

    def _cell_of_rows(self, columns: Sequence[Floats]) -> npt.NDArray[np.int64]:
        cell = np.zeros(len(columns[0]), dtype=np.int64)
        finite = np.ones(len(columns[0]), dtype=bool)
        for axis, column in enumerate(columns):
            cell = cell * self._cells + self._axis(column, axis)
            finite &= np.isfinite(column)
        cell[~finite] = self._buckets() - 1  # in no cell: no box holds them
        return cell

    def _cell_of_points(self, points: Floats) -> npt.NDArray[np.int64]:
        return np.stack([self._axis(points[:, a], a) for a in range(points.shape[1])], axis=1)


def _side(low: float, high: float, cells: int) -> float:
    """A cell's side where finite rows span ``[low, high]`` (finite even when ``high - low``
    overflows; as ``relay.data.spatial``'s grid)."""
    side = (high - low) / cells
    if not math.isfinite(side):
        side = min(high / cells - low / cells, sys.float_info.max)
    return side if side and math.isfinite(1.0 / side) else 1.0  # 0, or too small to invert


def _summed(dirty: Mask) -> npt.NDArray[np.int64]:
    """The summed-area table of ``dirty``, one zero row in front on each axis."""
    table = np.zeros(tuple(n + 1 for n in dirty.shape), dtype=np.int64)
    inner = dirty.astype(np.int64)
    for axis in range(dirty.ndim):
        inner = inner.cumsum(axis=axis)
    table[(slice(1, None),) * dirty.ndim] = inner
    return table
