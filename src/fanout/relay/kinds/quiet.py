"""Which box views saw no row change between two states: those are not cut (a ``NoUpdate``).

Rows are counted in the cells of a grid fixed once (with a band of cells on each side for
rows beyond it, and one bucket for rows without finite coordinates). Between a state and the
next, a cell is **changed** when it holds a row written since the earlier state's seq, or its
count of rows differs. A cell that is not changed holds the same rows, unchanged: each row in
it now was not written since, so it lay in that cell then, and the counts are equal. A box
whose cells are all unchanged therefore holds the same rows with the same values: its push
would enter, update and leave nothing. The summary is of one pair of states: a view held as of
the earlier one may use it (``QuietCells.since``).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

#: Rows per cell the fixed grid aims for when it is laid out (a finer grid tells more views
#: apart, but costs more to count per state).
PER_CELL = 4
#: Cells per axis at most.
MOST_CELLS = 256


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
        self._side: Floats | None = None
        self._cells = 0
        self._counts: npt.NDArray[np.int64] | None = None
        self._table: npt.NDArray[np.int64] | None = None  # changed cells' summed-area table

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
        self._side = np.array([_side(low, high, inner) for low, high in zip(lo, hi, strict=True)])
        self._cells = inner + 2  # a band of cells on each side holds rows beyond the grid

    def _buckets(self) -> int:
        dims = 0 if self._lo is None else len(self._lo)
        return int(self._cells**dims) + 1

    def _axis(self, values: Floats, axis: int) -> npt.NDArray[np.int64]:
        """Cells along ``axis``; the same monotonic formula for rows and box corners, so a box
        touches the cell of every point inside it."""
        assert self._lo is not None and self._side is not None
        with np.errstate(invalid="ignore", over="ignore"):
            raw = np.floor((values - self._lo[axis]) / self._side[axis]) + 1
        raw = np.nan_to_num(raw, nan=0.0, posinf=self._cells - 1, neginf=0.0)
        cells: npt.NDArray[np.int64] = np.clip(raw, 0, self._cells - 1).astype(np.int64)
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
    return side or 1.0


def _summed(dirty: Mask) -> npt.NDArray[np.int64]:
    """The summed-area table of ``dirty``, one zero row in front on each axis."""
    table = np.zeros(tuple(n + 1 for n in dirty.shape), dtype=np.int64)
    inner = dirty.astype(np.int64)
    for axis in range(dirty.ndim):
        inner = inner.cumsum(axis=axis)
    table[(slice(1, None),) * dirty.ndim] = inner
    return table
