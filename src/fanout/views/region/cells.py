"""Arithmetic on cells: axis-aligned boxes as plain ``(lo, hi)`` tuples.

The coverage algebra cuts views into many small boxes; building a validated :class:`Box` Struct
for each would dominate its run time, so it works on bare tuples and turns only its answers
into Boxes. Cells are closed, like regions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import TypeAlias

Point: TypeAlias = tuple[float, ...]
Cell: TypeAlias = tuple[Point, Point]


def meets(a_lo: Point, a_hi: Point, lo: Point, hi: Point) -> bool:
    """Whether cell ``a`` covers part of the cell ``(lo, hi)`` that matters for coverage.

    On an axis where the cell has extent, ``a`` must overlap it by a positive length: a box
    that only touches a face covers none of the cell's interior, and the interior decides
    coverage because a union of closed boxes that holds the interior holds its closure too. On
    an axis where the cell is flat, ``a`` must contain the cell's coordinate.
    """
    for a_low, a_high, low, high in zip(a_lo, a_hi, lo, hi, strict=True):
        if low == high:
            if not a_low <= low <= a_high:
                return False
        elif a_low >= high or a_high <= low:
            return False
    return True


def contains(a_lo: Point, a_hi: Point, lo: Point, hi: Point) -> bool:
    """Whether cell ``a`` holds the whole cell ``(lo, hi)``."""
    return all(
        a_low <= low and high <= a_high
        for a_low, a_high, low, high in zip(a_lo, a_hi, lo, hi, strict=True)
    )


def overlap(a_lo: Point, a_hi: Point, lo: Point, hi: Point) -> float:
    """Return the size of the overlap of ``a`` with ``(lo, hi)`` over the cell's non-flat axes."""
    total = 1.0
    for a_low, a_high, low, high in zip(a_lo, a_hi, lo, hi, strict=True):
        if low < high:
            total *= max(0.0, min(a_high, high) - max(a_low, low))
    return total


def subtract(lo: Point, hi: Point, hole_lo: Point, hole_hi: Point) -> list[Cell]:
    """Return disjoint cells whose union is the closure of ``(lo, hi)`` minus the hole.

    Peels one slab below and one above the hole on each axis in turn, then narrows the
    remainder to the hole on that axis: at most two cells per axis. The cells share only faces.
    """
    pieces: list[Cell] = []
    rest_lo, rest_hi = list(lo), list(hi)
    for axis, (hole_low, hole_high) in enumerate(zip(hole_lo, hole_hi, strict=True)):
        if rest_lo[axis] < hole_low:
            below_hi = rest_hi.copy()
            below_hi[axis] = hole_low
            pieces.append((tuple(rest_lo), tuple(below_hi)))
            rest_lo[axis] = hole_low
        if hole_high < rest_hi[axis]:
            above_lo = rest_lo.copy()
            above_lo[axis] = hole_high
            pieces.append((tuple(above_lo), tuple(rest_hi)))
            rest_hi[axis] = hole_high
    return pieces


def halve(lo: Point, hi: Point) -> tuple[Cell, Cell]:
    """Split a cell in two across the middle of its longest axis (one k-d tree step)."""
    axis = max(range(len(lo)), key=lambda i: hi[i] - lo[i])
    half = midpoint(lo[axis], hi[axis])
    lower_hi = (*hi[:axis], half, *hi[axis + 1 :])
    upper_lo = (*lo[:axis], half, *lo[axis + 1 :])
    return (lo, lower_hi), (upper_lo, hi)


def midpoint(low: float, high: float) -> float:
    """The middle of ``[low, high]``, inside it even when ``high - low`` overflows (a cell
    spanning most of the floats, whose halves would otherwise never shrink)."""
    half = (high - low) / 2
    return low + half if math.isfinite(half) else low / 2 + high / 2


def longest_side(lo: Point, hi: Point) -> float:
    """Return the length of the cell's longest side."""
    return max(high - low for low, high in zip(lo, hi, strict=True))


def volume(lo: Point, hi: Point) -> float:
    """Return the cell's area (2-D) or volume (3-D)."""
    return math.prod(high - low for low, high in zip(lo, hi, strict=True))


def merge(cells: Iterable[Cell]) -> list[Cell]:
    """Return the cells with neighbours that share a whole face joined into one.

    Sweeps each axis in turn, joining runs of cells that agree on every other axis and touch on
    this one, and repeats until a sweep joins nothing. The union of the cells is unchanged.
    """
    current = list(dict.fromkeys(cells))
    while True:
        count = len(current)
        for axis in range(len(current[0][0]) if current else 0):
            current = _merge_along(current, axis)
        if len(current) == count:
            return current


def _merge_along(cells: list[Cell], axis: int) -> list[Cell]:
    """Join cells that touch or overlap on ``axis`` and agree on every other axis."""
    rows: dict[tuple[Point, Point], list[Cell]] = defaultdict(list)
    for lo, hi in cells:
        key = (lo[:axis] + lo[axis + 1 :], hi[:axis] + hi[axis + 1 :])
        rows[key].append((lo, hi))
    merged: list[Cell] = []
    for row in rows.values():
        row.sort(key=lambda cell: cell[0][axis])
        run_lo, run_hi = row[0]
        for lo, hi in row[1:]:
            if lo[axis] <= run_hi[axis]:
                run_hi = hi if hi[axis] > run_hi[axis] else run_hi
            else:
                merged.append((run_lo, run_hi))
                run_lo, run_hi = lo, hi
        merged.append((run_lo, run_hi))
    return merged
