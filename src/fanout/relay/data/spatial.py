"""A uniform grid over the index columns of the relay's active buffer (CA 3197003 [0137], "a spatial
acceleration structure"; how it is laid out: docs/architecture.md, "Inside the relay").

Built once per buffer swap, it answers each view by looking only at the rows in the cells its
bounding box touches, then applying the view's exact ``match`` to them. Rows whose coordinates
are not finite are in no cell: no finite region matches them. A query always equals
``flatnonzero(view.match(*columns))``, the brute-force oracle the tests check against.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Self, cast

import numpy as np
import numpy.typing as npt

from fanout.relay.kernels.compiled import fixed_width, gridkernel
from fanout.views.region import Box, Intersection, RegionUnion, Sector, Sphere

Positions = npt.NDArray[np.intp]
Floats = npt.NDArray[np.float64]
IndexedRegion = Box | Sphere | Sector | RegionUnion | Intersection
Bounds = npt.NDArray[np.int64]

#: Rows per cell the grid aims for on uniform data: a small view touches a few cells, and a
#: cell's slice is long enough that the per-slice overhead stays small.
PER_CELL = 16
#: Above this fraction of rows as candidates, a full vectorised scan is cheaper than gathering.
SCAN_FRACTION = 0.5
#: Relative widening of query bounds (see ``_candidates``).
_SLACK = 1e-9
_NOWHERE: Positions = np.empty(0, dtype=np.intp)


class GridIndex:
    """Rows of one buffer bucketed by grid cell, for views that touch few cells.

    Attributes:
        columns: the coordinate columns the grid was built over (the buffer's own arrays; the
            buffer is not modified while it is active, so they stay valid).
        cells: cells per axis.
    """

    def __init__(
        self,
        columns: Sequence[npt.NDArray[np.generic]],
        per_cell: int = PER_CELL,
        carry: tuple[Mapping[str, npt.NDArray[Any]], npt.NDArray[np.int64]] | None = None,
    ):
        """Build the grid over ``columns`` (one array per index axis, equally long).

        Args:
            columns: coordinate arrays, one per axis (2 or 3 of them).
            per_cell: rows per cell to aim for.
            carry: a table's columns and its rows' changed seqs, to keep a copy of in cell order
                (``carried``).
        """
        self.columns: list[Floats] = [np.ascontiguousarray(c, dtype=np.float64) for c in columns]
        self.rows = len(self.columns[0]) if self.columns else 0
        dims = len(self.columns)
        compiled = gridkernel is not None and 0 < dims <= 3
        if compiled:
            finite, count, self.lo, self.hi = gridkernel.finite_bounds(self.columns)
        else:
            finite = np.ones(self.rows, dtype=bool)
            for column in self.columns:
                finite &= np.isfinite(column)
            count = int(finite.sum())
            self.lo = [float(c[finite].min()) if count else 0.0 for c in self.columns]
            self.hi = [float(c[finite].max()) if count else 0.0 for c in self.columns]
        self.cells = max(1, math.ceil((count / per_cell) ** (1.0 / max(dims, 1)))) if count else 1
        self.side = [
            _side(low, high, self.cells) for low, high in zip(self.lo, self.hi, strict=True)
        ]
        #: ``lo``, ``hi`` and ``side`` as arrays, for the vectorised and compiled lookups.
        self.origin, self.top = np.array(self.lo), np.array(self.hi)
        self.side_array = np.array(self.side)
        if compiled:
            self.order, self.offsets = gridkernel.bin_rows(
                self.columns, finite.view(np.uint8), self.origin, self.side_array, self.cells
            )
        else:
            self.order, self.offsets = self._bin(finite)
        self._offsets: list[int] = self.offsets.tolist()  # Python ints index faster
        #: With ``carry``: the table's columns and changed seqs in cell order, so that the
        #: compiled kernel (``batchcut``) reads a box's rows from a few runs of memory rather
        #: than from rows scattered over the table.
        self.carried: dict[str, npt.NDArray[Any]] = {}
        self.carried_changed: npt.NDArray[np.int64] | None = None
        names = list(carry[0]) if carry is not None else []
        arrays = [*self.columns, *(carry[0].values() if carry is not None else ())]
        if carry is not None:
            arrays.append(carry[1])
        #: The coordinates in cell order: a cell's candidates are read from contiguous memory.
        self.binned: list[Floats]
        if compiled and fixed_width(*arrays):
            taken = gridkernel.gather(arrays, self.order)
        else:
            taken = [array.take(self.order) for array in arrays]
        self.binned = taken[:dims]
        if carry is not None:
            self.carried = dict(zip(names, taken[dims : dims + len(names)], strict=True))
            self.carried_changed = taken[-1]

    def parts(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The grid's arrays by name and its other figures: what ``restore`` needs to rebuild
        it without binning again (a leader lays them out in shared memory for its workers,
        ``relay.data.layout``)."""
        arrays: dict[str, npt.NDArray[Any]] = {"order": self.order, "offsets": self.offsets}
        for axis, (column, binned) in enumerate(zip(self.columns, self.binned, strict=True)):
            arrays[f"axis{axis}"], arrays[f"binned{axis}"] = column, binned
        for name, values in self.carried.items():
            arrays[f"carried:{name}"] = values
        if self.carried_changed is not None:
            arrays["carried_changed"] = self.carried_changed
        figures = {"dims": len(self.columns), "rows": self.rows, "cells": self.cells}
        return arrays, {**figures, "lo": self.lo, "hi": self.hi, "side": self.side}

    @classmethod
    def restore(cls, arrays: Mapping[str, npt.NDArray[Any]], figures: Mapping[str, Any]) -> Self:
        """The grid ``parts`` described (its arrays used as they are, not copied)."""
        grid = cls.__new__(cls)
        dims = int(figures["dims"])
        grid.columns = [arrays[f"axis{axis}"] for axis in range(dims)]
        grid.binned = [arrays[f"binned{axis}"] for axis in range(dims)]
        grid.rows, grid.cells = int(figures["rows"]), int(figures["cells"])
        grid.lo, grid.hi = [float(v) for v in figures["lo"]], [float(v) for v in figures["hi"]]
        grid.side = [float(v) for v in figures["side"]]
        grid.origin, grid.top = np.array(grid.lo), np.array(grid.hi)
        grid.side_array = np.array(grid.side)
        grid.order, grid.offsets = arrays["order"], arrays["offsets"]
        grid._offsets = grid.offsets.tolist()
        prefix = "carried:"
        grid.carried = {n[len(prefix) :]: a for n, a in arrays.items() if n.startswith(prefix)}
        grid.carried_changed = arrays.get("carried_changed")
        return grid

    def _bin(self, finite: npt.NDArray[np.bool_]) -> tuple[Positions, npt.NDArray[np.int64]]:
        """``gridkernel.bin_rows`` with numpy: the rows in cell order, and where cells start."""
        dims = len(self.columns)
        cell = np.zeros(self.rows, dtype=np.int64)
        for axis, column in enumerate(self.columns):
            cell = cell * self.cells + self._axis_cells(axis, column)
        cell[~finite] = self.cells**dims  # past every real cell: never in a slice
        key = cell.astype(np.uint16) if self.cells**dims < 1 << 16 else cell
        order: Positions = np.argsort(key, kind="stable")
        counts = np.bincount(cell, minlength=self.cells**dims + 1)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return order, offsets

    def _axis_cells(self, axis: int, column: Floats) -> npt.NDArray[np.int64]:
        # Overflow (a difference beyond the largest floats) is infinite, hence the last cell,
        # as in ``_span``: both sides compute the same monotonic formula.
        with np.errstate(invalid="ignore", over="ignore"):
            raw = np.floor((column - self.lo[axis]) / self.side[axis])
        raw = np.nan_to_num(raw, nan=0.0, posinf=self.cells - 1, neginf=0.0)
        return np.clip(raw, 0, self.cells - 1).astype(np.int64)

    def query(self, region: IndexedRegion) -> Positions:
        """The sorted positions of the rows ``region`` matches (as a full scan would find).

        Args:
            region: a box, sphere, sector or union of the grid's dimension.
        """
        if not self.rows:
            return _NOWHERE
        members = region.members if isinstance(region, RegionUnion) else (region,)
        parts = [self._candidates(member.bounds()) for member in members]
        total = sum(len(part) for part in parts)
        if total > SCAN_FRACTION * self.rows:
            with np.errstate(invalid="ignore"):  # non-finite rows: see the module docstring
                return np.flatnonzero(region.match(*self._coords(None)))
        candidates = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(members) > 1:
            candidates = _distinct(candidates)
        coords = self._coords(candidates)
        # The common case, boxes, without match()'s conversions.
        inside = _in_box(coords, region) if isinstance(region, Box) else region.match(*coords)
        matched = candidates[inside]
        matched.sort()
        return matched

    def query_many(self, boxes: Sequence[Box]) -> tuple[Positions, Bounds]:
        """``query`` of many boxes at once, with one pass of vectorised steps for all of them.

        A round of pushes asks the same grid for hundreds of small boxes; asking one at a time
        costs a dozen numpy calls each on a few hundred rows. Here every box's cell slices are
        laid end to end, gathered, filtered and sorted together.

        Args:
            boxes: boxes of the grid's dimension.

        Returns:
            ``(positions, bounds)``: the rows of box ``i`` are ``positions[bounds[i]:bounds[i +
            1]]``, sorted, exactly ``query(boxes[i])``.
        """
        count = len(boxes)
        if not self.rows or not count:
            return _NOWHERE, np.zeros(count + 1, dtype=np.int64)
        lo = np.array([box.lo for box in boxes], dtype=np.float64)
        hi = np.array([box.hi for box in boxes], dtype=np.float64)
        first, last = self.spans(lo, hi)
        lengths = np.maximum(last - first + 1, 0)
        slices = np.prod(lengths[:, :-1], axis=1)  # one slice per cell of the outer axes
        owner = np.repeat(np.arange(count), slices)
        local = np.arange(len(owner)) - np.repeat(np.cumsum(slices) - slices, slices)
        outer: list[npt.NDArray[np.int64]] = []
        for axis in reversed(range(lo.shape[1] - 1)):  # itertools.product's order
            span = lengths[owner, axis]
            outer.insert(0, first[owner, axis] + local % span)
            local //= span
        base = np.zeros(len(owner), dtype=np.int64)
        for cells in outer:
            base = base * self.cells + cells
        base *= self.cells
        start = self.offsets[base + first[owner, -1]]
        size = np.maximum(self.offsets[base + last[owner, -1] + 1] - start, 0)
        per_box = np.bincount(owner, weights=size, minlength=count).astype(np.int64)
        total = int(per_box.sum())
        at = np.repeat(start - (np.cumsum(size) - size), size) + np.arange(total)
        # Each candidate against its box's bounds, repeated per box (cheaper than gathering
        # them by owner); masks applied with ``compress`` (boolean indexing is slower).
        inside = np.ones(total, dtype=bool)
        for axis, binned in enumerate(self.binned):
            values = binned.take(at)
            inside &= values >= np.repeat(lo[:, axis], per_box)
            inside &= values <= np.repeat(hi[:, axis], per_box)
        code = np.repeat(np.arange(count, dtype=np.int64) * self.rows, per_box)
        code += self.order.take(at)
        code = code.compress(inside)
        code.sort()  # by box, then by row
        owner, positions = np.divmod(code, self.rows)
        bounds = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=count), out=bounds[1:])
        return positions.astype(np.intp, copy=False), bounds

    def spans(self, lo: Floats, hi: Floats) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``_span`` of every box (rows of ``lo``/``hi``) on every axis; empty: first > last.

        ``cutkernel.spans`` does the same arithmetic in compiled code: keep the two alike.
        """
        origin, top, side = self.origin, self.top, self.side_array
        # Near the largest floats the pad or a difference overflows to infinity, which spans
        # to the first or last cell, as ``_span`` and ``_axis_cells`` do.
        with np.errstate(over="ignore"):
            pad = _SLACK * (np.abs(lo) + np.abs(hi) + (hi - lo) + 1.0)
            low, high = lo - pad, hi + pad
            # Clipped to the cells like the rows' (``_axis_cells``) before the cast: a quotient
            # may round up to ``cells`` (or beyond any integer) for a box inside the data.
            first = np.floor(np.clip((low - origin) / side, 0, self.cells - 1)).astype(np.int64)
            last = np.floor(np.clip((high - origin) / side, 0, self.cells - 1)).astype(np.int64)
        beyond = ((high < origin) | (low > top)).any(axis=1)
        last[beyond] = -1  # no cells at all
        return first, last

    def _coords(self, at: Positions | None) -> list[Floats]:
        if at is None:
            return self.columns
        return [column[at] for column in self.columns]

    def _candidates(self, box: Box) -> Positions:
        """Positions of the rows in the cells under ``box`` (a superset of those inside it)."""
        spans = [
            self._span(axis, low, high)
            for axis, (low, high) in enumerate(zip(box.lo, box.hi, strict=True))
        ]
        if None in spans:
            return _NOWHERE
        cells, offsets, order = self.cells, self._offsets, self.order
        *outer, (first, last) = cast(list[tuple[int, int]], spans)
        slices: list[Positions] = []
        for prefix in itertools.product(*(range(a, b + 1) for a, b in outer)):
            base = 0
            for index in prefix:
                base = base * cells + index
            start, stop = offsets[base * cells + first], offsets[base * cells + last + 1]
            if stop > start:
                slices.append(order[start:stop])
        if not slices:
            return _NOWHERE
        return np.concatenate(slices) if len(slices) > 1 else slices[0]

    def _span(self, axis: int, low: float, high: float) -> tuple[int, int] | None:
        """The cells ``[low, high]`` touches on ``axis`` (None: beyond every finite point)."""
        # Bounds are computed in floating point like ``match``; a point the match accepts may
        # sit a few ulps outside them, so widen by far more than rounding can reach.
        pad = _SLACK * (abs(low) + abs(high) + (high - low) + 1.0)
        low, high = low - pad, high + pad
        origin = self.lo[axis]
        if high < origin or low > self.hi[axis]:
            return None
        # The rows' formula, clamped the same way: monotonic, so a point inside the box is in
        # a cell between these two.
        side, top = self.side[axis], float(self.cells - 1)
        first = math.floor(min(max((low - origin) / side, 0.0), top))
        last = math.floor(min(max((high - origin) / side, 0.0), top))
        return first, last


def _side(low: float, high: float, cells: int) -> float:
    """A cell's side on an axis whose finite points span ``[low, high]`` (finite even when
    ``high - low`` overflows)."""
    side = (high - low) / cells
    if not math.isfinite(side):
        side = min(high / cells - low / cells, sys.float_info.max)
    return side or 1.0


def _in_box(coords: list[Floats], box: Box) -> npt.NDArray[np.bool_]:
    """``box.match(*coords)`` for float64 coordinates: the same comparisons, fewer steps."""
    inside = (coords[0] >= box.lo[0]) & (coords[0] <= box.hi[0])
    for column, low, high in zip(coords[1:], box.lo[1:], box.hi[1:], strict=True):
        inside &= column >= low
        inside &= column <= high
    return inside


def _distinct(positions: Positions) -> Positions:
    """The distinct positions, sorted (members of a union may share cells)."""
    ordered = np.sort(positions)
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]
