"""Bounding boxes as arrays, for overlap tests that look only at the boxes near each other.

The boxes are put in columns of the first axis (as wide as the widest box, or wider when the
boxes are few and spread) and sorted by column, then by their lower bound on the second axis. A
box can meet a query only if its lower bounds lie within ``[query.lo - widest, query.hi]`` on
both axes, so each query looks, in each column it spans, at the run found by bisection, not at
every box: thousands of views against thousands of primitives cost about what lies near each,
where testing every pair (as the relay's housekeeping did, twice a second) made idle
subscribers cost the relay CPU in the square of their number. Pairs are tested in chunks of at
most ``CHUNK`` candidates, so memory stays bounded however large a box is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from fanout.views.region import Box

#: Candidate pairs tested at once (bounds the temporary arrays).
CHUNK = 1 << 18

Indices = npt.NDArray[np.intp]


class Boxes:
    """Boxes (``views.region.Box``, all of one dimension) indexed for overlap tests; results
    name the boxes by their position in the sequence given."""

    def __init__(self, boxes: Sequence[Box]) -> None:
        dims = boxes[0].dims if boxes else 0
        lo = np.array([b.lo for b in boxes], dtype=np.float64).reshape(len(boxes), dims)
        hi = np.array([b.hi for b in boxes], dtype=np.float64).reshape(len(boxes), dims)
        self.dims, count = dims, len(boxes)
        #: The axis bisected within a column: the second, or the only one.
        self._bisected = 1 if dims > 1 else 0
        with np.errstate(over="ignore"):  # boxes spanning the floats: inf, and one column
            self._widest = (hi - lo).max(axis=0) if count and dims else np.zeros(dims)
            self._x0 = float(lo[:, 0].min()) if count and dims else 0.0
            span = float(lo[:, 0].max()) - self._x0 if count and dims else 0.0
        self._side = max(float(self._widest[0]) if dims else 0.0, span / max(count, 1)) or 1.0
        #: Whether the boxes are in columns (not when the first axis overflows).
        self._columned = dims > 1 and bool(np.isfinite(self._widest[0])) and math.isfinite(span)
        column = self._column(lo[:, 0]) if self._columned else np.zeros(count, dtype=np.int64)
        self._columns = int(column.max()) + 1 if count else 0
        #: The distinct lower bounds on the bisected axis, sorted: a box's rank is its place.
        self._starts = np.unique(lo[:, self._bisected]) if count and dims else np.zeros(0)
        rank = np.searchsorted(self._starts, lo[:, self._bisected]) if dims else column
        keys = column * (len(self._starts) + 1) + rank
        #: Sorted position -> position given.
        self.order: Indices = np.argsort(keys, kind="stable")
        self._keys = keys[self.order]
        self.lo, self.hi = lo[self.order], hi[self.order]

    def __len__(self) -> int:
        return len(self.lo)

    def _column(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        return np.floor((x - self._x0) / self._side).astype(np.int64)

    def _runs(
        self, lo: npt.NDArray[np.float64], hi: npt.NDArray[np.float64]
    ) -> tuple[Indices, Indices, Indices]:
        """For queries ``lo``/``hi`` (rows): one row per column each may meet, as (the query's
        row, the first and past-the-last sorted position of the boxes there that may)."""
        axis, widest = self._bisected, self._widest
        with np.errstate(over="ignore", invalid="ignore"):  # far out: +-inf bisect, clip well
            low = np.searchsorted(self._starts, lo[:, axis] - widest[axis], "left")
            first = np.floor((lo[:, 0] - widest[0] - self._x0) / self._side)
            last = np.floor((hi[:, 0] - self._x0) / self._side)
        high = np.searchsorted(self._starts, hi[:, axis], "right")
        if self._columned:
            first = np.clip(first, 0, self._columns).astype(np.int64)
            last = np.clip(last, -1, self._columns - 1).astype(np.int64)
        else:
            first = last = np.zeros(len(lo), dtype=np.int64)
        each = np.maximum(last - first + 1, 0)
        query = np.repeat(np.arange(len(lo)), each)
        column = np.repeat(first, each) + _offsets(each)
        base = column * (len(self._starts) + 1)
        start = np.searchsorted(self._keys, base + low[query], "left")
        end = np.searchsorted(self._keys, base + high[query], "left")
        return query, start, end

    def any_meeting(self, others: Boxes) -> npt.NDArray[np.bool_]:
        """For each of ``others`` (by its position given), whether any of these boxes meets it
        (closed: touching counts)."""
        found = np.zeros(len(others), dtype=bool)
        for _, theirs in self.pairs(others, interior=False):
            found[others.order[theirs]] = True
        return found

    def pairs(self, others: Boxes, *, interior: bool) -> Iterator[tuple[Indices, Indices]]:
        """The pairs of these boxes and ``others`` that meet (``interior``: share interior,
        touching does not count), chunk by chunk, as sorted positions (``order`` maps them
        to the positions given): this side's, then theirs."""
        if not len(self) or not len(others) or self.dims != others.dims:
            return
        query, start, end = self._runs(others.lo, others.hi)
        counts = np.maximum(end - start, 0)
        total = np.cumsum(counts)
        if not len(total) or not total[-1]:
            return
        cuts = np.searchsorted(total, np.arange(CHUNK, int(total[-1]), CHUNK), "left")
        bounds = np.unique(np.concatenate([[0], cuts, [len(counts)]]))
        for first, last in itertools.pairwise(bounds):
            each = counts[first:last]
            theirs = np.repeat(query[first:last], each)
            mine = np.repeat(start[first:last], each) + _offsets(each)
            meets = self._meet(mine, others.lo[theirs], others.hi[theirs], interior)
            yield mine[meets], theirs[meets]

    def meeting(self, box: Box, *, interior: bool = False) -> Indices:
        """The positions given of the boxes that meet ``box`` (``interior``: that share
        interior with it), in ascending order."""
        if not len(self) or self.dims != box.dims:
            return np.zeros(0, dtype=np.intp)
        lo = np.asarray(box.lo, dtype=np.float64)[None, :]
        hi = np.asarray(box.hi, dtype=np.float64)[None, :]
        _, start, end = self._runs(lo, hi)
        each = np.maximum(end - start, 0)
        mine = np.repeat(start, each) + _offsets(each)
        meets = self._meet(mine, lo, hi, interior)
        return np.sort(self.order[mine[meets]])

    def _meet(
        self,
        mine: Indices,
        lo: npt.NDArray[np.float64],
        hi: npt.NDArray[np.float64],
        interior: bool,
    ) -> npt.NDArray[np.bool_]:
        """Whether each of these boxes at sorted positions ``mine`` meets the box ``lo``/``hi``
        beside it (rows, or one row for all)."""
        own_lo, own_hi = self.lo[mine], self.hi[mine]
        meets = (own_lo < hi) & (own_hi > lo) if interior else (own_lo <= hi) & (own_hi >= lo)
        return np.asarray(meets.all(axis=1), dtype=bool)


def _offsets(counts: Indices) -> Indices:
    """0, 1, ... counts[0] - 1, then 0, 1, ... counts[1] - 1, and so on."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
