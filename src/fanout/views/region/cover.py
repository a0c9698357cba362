"""Coverage of region views: the relay's step S430/S440 for spatial subscriptions (CA 3197003
[0155]: serve at once if the difference with what is held is empty, else subscribe for at least
the difference; [0105]: decompose until each part is wholly covered or wholly disjoint).

A view primitive is decomposed (``_uncovered``) cell by cell, from its bounding box:

1. a cell the view certainly misses is dropped;
2. a cell whose part of the view lies inside one held solid is covered
   (:func:`fanout.views.region.solids.active_constraints`);
3. a held box overlapping the cell is cut out of it exactly and the pieces decomposed further:
   boxes alone give an exact answer;
4. a cell inside the view that nothing held meets is uncovered, whole;
5. otherwise the cell is halved across its longest side, down to 1/2**depth of the view's, where
   it counts as uncovered: ``covers`` may say False wrongly, never True. An ``Intersection`` is
   taken as its bounding box (conservative, likewise).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.views.region import (
    PRIMITIVES,
    Box,
    Intersection,
    Primitive,
    RegionUnion,
    Relative,
    cells,
)
from fanout.views.region.cells import Cell
from fanout.views.region.coverindex import CoverIndex, bounding_solids
from fanout.views.region.solids import CellSolid, Constraint, Solid, active_constraints, solid_of

Held: TypeAlias = tuple[Solid, tuple[Constraint, ...]]
"""A held solid near the view, with the constraints a cell must meet for it to be covered."""

DEFAULT_DEPTH = {2: 5, 3: 4}
"""Halvings of the view's longest side before an undecided cell counts as uncovered.

A 2-D view is resolved to 1/32 of its size, a 3-D one to 1/16: the residual of a curved view
stays within some tens (2-D) or a few hundred (3-D) boxes, and over-reaches the uncovered part
by at most one such cell along its boundary. The planner widens it to a bounding box anyway.
"""


def view_primitives(view: object) -> tuple[Primitive, ...]:
    """Return the primitives of a region view (a union's members; an intersection's bounding
    box, see the module).

    Raises:
        InvalidView: ``view`` is relative (it must be resolved against the entity's position
            first) or not a region.
    """
    if isinstance(view, PRIMITIVES):
        return (view,)
    if isinstance(view, RegionUnion):
        return view.members
    if isinstance(view, Intersection):
        return (view.bounds(),)
    if isinstance(view, Relative):
        raise InvalidView(
            f"{view}: a relative view is not coverable; resolve(position) it against the "
            f"entity's position first"
        )
    raise InvalidView(f"{view!r} is not a region view")


def index_of(have: CoverIndex | Sequence[object]) -> CoverIndex:
    """Return ``have`` as a cover index, building one from its regions if it is a sequence.

    Views of other kinds in ``have`` cover nothing of a region and are left out.

    Raises:
        InvalidView: ``have`` holds a relative region (resolve it first).
    """
    if isinstance(have, CoverIndex):
        return have
    return CoverIndex(
        item for item in have if isinstance(item, (*PRIMITIVES, RegionUnion, Relative))
    )


def region_covers(
    have: CoverIndex | Sequence[object], view: object, depth: int | None = None
) -> bool:
    """Whether the regions in ``have`` together cover every point of the region ``view``.

    Args:
        have: the regions held, as a cover index (what a relay keeps) or a sequence.
        view: a box, sphere, sector or union.
        depth: halvings before an undecided cell counts as uncovered (DEFAULT_DEPTH).

    Returns:
        True only if ``view`` is covered; False if it is not, or if a curved boundary leaves
        it undecided at ``depth``.

    Raises:
        InvalidView: ``view`` or a member of ``have`` is relative, or ``view`` is not a region.
    """
    primitives = view_primitives(view)
    index = index_of(have)
    return all(_covers_primitive(index, primitive, depth) for primitive in primitives)


def region_residual(
    have: CoverIndex | Sequence[object], view: object, depth: int | None = None
) -> list[Primitive]:
    """Return primitives that, with ``have``, cover the region ``view``; [] if it is covered.

    A view no held region meets comes back whole. Otherwise the residual is disjoint boxes:
    exactly the uncovered part of a box view held as boxes, else cells that each hold some
    uncovered part of the view (see the module docstring), neighbours merged. The members of a
    union are taken in turn, each against ``have`` plus the residual found so far, so
    overlapping members do not ask twice for the same part.

    Whatever it returns, ``region_covers`` of ``have`` plus it is true: a relay that acquires
    the residual can serve the view. Cut pieces are checked for it (``_settle``), since
    ``region_covers`` then cuts cells at other lines (the pieces' faces), and its one-sided
    tests may leave slivers along a curve undecided.

    Raises:
        InvalidView: as :func:`region_covers`.
    """
    primitives = view_primitives(view)
    index = index_of(have)
    found: list[Primitive] = []
    for primitive in primitives:
        extra = [solid_of(piece) for piece in found]
        pieces, exact = _primitive_residual(index, primitive, extra, depth)
        if not exact and pieces and pieces != [primitive]:
            pieces = _settle(index, primitive, extra, pieces, depth)
        found.extend(pieces)
    return found


#: Rounds of ``_settle`` before a primitive is asked for whole.
_SETTLE_ROUNDS = 2


def _settle(
    index: CoverIndex,
    primitive: Primitive,
    extra: list[Solid],
    pieces: list[Primitive],
    depth: int | None,
) -> list[Primitive]:
    """``pieces`` and, if ``region_covers`` does not find the primitive covered with them held,
    the residual left then, for a few rounds; after that the primitive whole (a primitive
    always covers itself)."""
    for _ in range(_SETTLE_ROUNDS):
        held = extra + [solid_of(piece) for piece in pieces]
        if _covers_primitive(index, primitive, depth, held):
            return pieces
        pieces = pieces + _primitive_residual(index, primitive, held, depth)[0]
    held = extra + [solid_of(piece) for piece in pieces]
    return pieces if _covers_primitive(index, primitive, depth, held) else [primitive]


def _covers_primitive(
    index: CoverIndex, primitive: Primitive, depth: int | None, extra: Sequence[Solid] = ()
) -> bool:
    """Whether the held solids (the index's, and ``extra``) cover one view primitive."""
    view = solid_of(primitive)
    near = index.near(view.lo, view.hi) + bounding_solids(extra, view.lo, view.hi)
    if not near:
        return False
    if isinstance(view, CellSolid) and all(isinstance(solid, CellSolid) for solid in near):
        answer = _boxes_cover(view, near)
        if answer is not None:
            return answer
    held = _against(view, near)
    if any(not active for _, active in held):
        return True
    uncovered = _uncovered(view, held, _min_side(view, depth))
    return next(uncovered, None) is None


#: Largest (held boxes x elementary cells) ``_boxes_cover`` builds; beyond it, ``_uncovered``.
_GRID_LIMIT = 1 << 18
#: Up to this many (held boxes x elementary cells), ``_boxes_cover`` checks the cells in plain
#: Python: a view near a few tiles makes a grid of a handful of cells, where numpy's per-call
#: cost would dominate.
_PLAIN_LIMIT = 64


def _boxes_cover(view: CellSolid, boxes: list[Solid]) -> bool | None:
    """Exactly whether closed boxes cover the closed box ``view``, on a grid of their edges.

    The edges of the boxes inside the view cut it into elementary cells; each box is a union
    of whole cells, so the boxes cover the view if and only if every cell lies inside one box.
    On an axis where the view is flat its one cell is that coordinate. A box holding the whole
    view decides at once; a small grid is checked cell by cell, a larger one vectorised (one
    comparison per axis and box). None when the grid would exceed ``_GRID_LIMIT``.
    """
    lo, hi = view.lo, view.hi
    axes = range(len(lo))
    if any(all(b.lo[a] <= lo[a] and hi[a] <= b.hi[a] for a in axes) for b in boxes):
        return True
    edges = [_edges(lo[a], hi[a], [c for b in boxes for c in (b.lo[a], b.hi[a])]) for a in axes]
    size = len(boxes) * math.prod(len(axis) - 1 or 1 for axis in edges)
    if size > _GRID_LIMIT:
        return None
    if size <= _PLAIN_LIMIT:
        return all(
            any(all(b.lo[a] <= c[a][0] and c[a][1] <= b.hi[a] for a in axes) for b in boxes)
            for c in itertools.product(*(_spans(axis) for axis in edges))
        )
    return _grid_cover(edges, boxes)


def _edges(start: float, stop: float, faces: list[float]) -> list[float]:
    """The sorted cuts of ``[start, stop]``: its ends and the faces strictly inside."""
    if start == stop:
        return [start]
    return sorted({start, stop, *(c for c in faces if start < c < stop)})


def _spans(edges: list[float]) -> list[tuple[float, float]]:
    """The elementary intervals between consecutive cuts (a flat axis: its one point)."""
    if len(edges) == 1:
        return [(edges[0], edges[0])]
    return list(itertools.pairwise(edges))


def _grid_cover(edges: list[list[float]], boxes: list[Solid]) -> bool:
    """``_boxes_cover`` over its grid, vectorised."""
    low = np.array([box.lo for box in boxes], dtype=np.float64)
    high = np.array([box.hi for box in boxes], dtype=np.float64)
    inside: npt.NDArray[np.bool_] | None = None
    dims = len(edges)
    for axis, cuts in enumerate(edges):
        ends = np.array(cuts, dtype=np.float64)
        left, right = (ends, ends) if len(ends) == 1 else (ends[:-1], ends[1:])
        holds = (low[:, axis, None] <= left) & (right <= high[:, axis, None])
        shape = [len(boxes)] + [1] * dims
        shape[1 + axis] = len(left)
        holds = holds.reshape(shape)
        inside = holds if inside is None else inside & holds
    assert inside is not None
    return bool(inside.any(axis=0).all())


def _primitive_residual(
    index: CoverIndex, primitive: Primitive, extra: list[Solid], depth: int | None
) -> tuple[list[Primitive], bool]:
    """Return the residual of one view primitive against the index plus ``extra`` solids, and
    whether it is exact: a box held only as boxes is cut exactly (``_uncovered`` cuts boxes out
    of boxes, and ``_boxes_cover`` decides on the same faces), so it needs no settling."""
    view = solid_of(primitive)
    nearby = index.near(view.lo, view.hi) + bounding_solids(extra, view.lo, view.hi)
    exact = isinstance(view, CellSolid) and all(isinstance(s, CellSolid) for s in nearby)
    held = _against(view, nearby)
    if any(not active for _, active in held):
        return [], exact
    if not any(solid.meets_cell(view.lo, view.hi) for solid, _ in held):
        return [primitive], exact
    pieces = sorted(cells.merge(_uncovered(view, held, _min_side(view, depth))))
    if pieces == [(view.lo, view.hi)]:
        return [primitive], exact
    return [Box(lo, hi) for lo, hi in pieces], exact


def _min_side(view: Solid, depth: int | None) -> float:
    """Return the side below which an undecided cell of ``view`` counts as uncovered."""
    if depth is None:
        depth = DEFAULT_DEPTH[len(view.lo)]
    if depth < 0:
        raise InvalidView(f"depth = {depth} is negative")
    return cells.longest_side(view.lo, view.hi) * 0.5**depth


def _against(view: Solid, solids: list[Solid]) -> list[Held]:
    """Pair each held solid with what a cell must meet for it to cover the view's part."""
    return [(solid, active_constraints(solid, view)) for solid in solids]


def _uncovered(view: Solid, held: list[Held], min_side: float) -> Iterator[Cell]:
    """Yield disjoint cells holding every point of ``view`` that no held solid covers.

    Depth-first with an explicit stack, so ``covers`` stops at the first uncovered cell.
    Each yielded cell meets the view (or may: the tests are one-sided) and is not covered.
    """
    stack: list[tuple[Cell, list[Held]]] = [((view.lo, view.hi), held)]
    while stack:
        (lo, hi), candidates = stack.pop()
        inside = view.contains_cell(lo, hi)
        if not inside and not view.meets_cell(lo, hi):
            continue
        near = [pair for pair in candidates if pair[0].meets_cell(lo, hi)]
        if any(_holds(active, lo, hi) for _, active in near):
            continue
        hole = _largest_box(near, lo, hi)
        if hole is not None:
            rest = [pair for pair in near if pair[0] is not hole]
            pieces = cells.subtract(lo, hi, hole.lo, hole.hi)
            stack.extend((piece, rest) for piece in pieces)
        elif (inside and not near) or cells.longest_side(lo, hi) <= min_side:
            yield lo, hi
        elif (lo, hi) in (halves := cells.halve(lo, hi)):
            yield lo, hi  # too narrow for floating point to split: as small as cells get
        else:
            stack.extend((half, near) for half in halves)


def _holds(active: tuple[Constraint, ...], lo: cells.Point, hi: cells.Point) -> bool:
    """Whether a cell meets every active constraint of a held solid (so it is covered)."""
    return all(constraint.contains_cell(lo, hi) for constraint in active)


def _largest_box(held: list[Held], lo: cells.Point, hi: cells.Point) -> CellSolid | None:
    """Return the held box overlapping the cell most, or None if no box meets it.

    Cutting the largest overlap first leaves the fewest, largest pieces.
    """
    best: CellSolid | None = None
    best_overlap = -1.0
    for solid, _ in held:
        if isinstance(solid, CellSolid):
            overlap = cells.overlap(solid.lo, solid.hi, lo, hi)
            if overlap > best_overlap:
                best, best_overlap = solid, overlap
    return best
