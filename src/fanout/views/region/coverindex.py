"""The index a relay keeps over the region primitives it holds upstream.

Founding document [78]: the relay asks, for every new subscription, whether the subscriptions in
its subscriber data store (``relay.core.upstream``) collectively cover it. With thousands of held
primitives that question must not look at each of them in Python: :class:`CoverIndex` keeps
their bounding boxes in column arrays, so finding the few that can matter for a view is one
vectorised comparison per axis, and adding or removing a primitive is O(1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.views.region import PRIMITIVES, Primitive, RegionUnion, Relative
from fanout.views.region.solids import Solid, solid_of

Point: TypeAlias = tuple[float, ...]

_INITIAL_CAPACITY = 64


class CoverIndex:
    """A multiset of held region primitives, indexed by bounding box.

    Adding a union adds its members; adding a primitive already held counts it twice, and it
    stays held until removed as often (two subscriptions may widen to the same box).

    Raises (from ``add``):
        InvalidView: a view that is not an absolute region.
    """

    def __init__(self, held: Iterable[object] = ()) -> None:
        self._tables: dict[int, _Table] = {}
        self._counts: dict[Primitive, int] = {}
        for view in held:
            self.add(view)

    def __len__(self) -> int:
        """The number of distinct primitives held."""
        return len(self._counts)

    def __iter__(self) -> Iterator[Primitive]:
        """Every distinct primitive held, in no particular order."""
        return iter(self._counts)

    def __contains__(self, primitive: object) -> bool:
        return primitive in self._counts

    def add(self, view: object) -> None:
        """Hold one more copy of a region (each member of a union).

        Raises:
            InvalidView: ``view`` is not a box, sphere, sector or union of them.
        """
        for primitive in held_primitives(view):
            count = self._counts.get(primitive, 0)
            if count == 0:
                table = self._tables.get(primitive.dims)
                if table is None:
                    table = self._tables[primitive.dims] = _Table(primitive.dims)
                table.insert(solid_of(primitive))
            self._counts[primitive] = count + 1

    def remove(self, view: object) -> None:
        """Drop one copy of a region (each member of a union) added earlier.

        Raises:
            InvalidView: ``view`` is not a box, sphere, sector or union of them.
            KeyError: a primitive of ``view`` is not held.
        """
        for primitive in held_primitives(view):
            count = self._counts[primitive]
            if count == 1:
                del self._counts[primitive]
                self._tables[primitive.dims].delete(primitive)
            else:
                self._counts[primitive] = count - 1

    def near(self, lo: Point, hi: Point) -> list[Solid]:
        """Return the held solids whose bounding boxes meet the closed box ``(lo, hi)``.

        Only solids of the box's dimension are returned: a 3-D region covers nothing of a 2-D
        view, nor the other way round.
        """
        table = self._tables.get(len(lo))
        return [] if table is None else table.near(lo, hi)


def held_primitives(view: object) -> tuple[Primitive, ...]:
    """Return the primitives a held region stands for (a union's members).

    Raises:
        InvalidView: ``view`` is a relative region (resolve it first) or not a region.
    """
    if isinstance(view, PRIMITIVES):
        return (view,)
    if isinstance(view, RegionUnion):
        return view.members
    if isinstance(view, Relative):
        raise InvalidView(f"{view}: resolve(position) the relative view before holding it")
    raise InvalidView(f"{view!r} is not a region; a cover index holds regions only")


class _Table:
    """Bounding boxes of solids of one dimension, one array per axis and end.

    Slots freed by ``delete`` get an empty box (lo = +inf, hi = -inf) that meets nothing and
    are reused by the next ``insert``; the arrays double when full.
    """

    def __init__(self, dims: int) -> None:
        self.lo: npt.NDArray[np.float64] = np.full((dims, _INITIAL_CAPACITY), np.inf)
        self.hi: npt.NDArray[np.float64] = np.full((dims, _INITIAL_CAPACITY), -np.inf)
        self.solids: list[Solid | None] = []
        self.slots: dict[Primitive, int] = {}
        self.free: list[int] = []

    def insert(self, solid: Solid) -> None:
        """Store a solid's bounding box in a free slot."""
        if self.free:
            slot = self.free.pop()
            self.solids[slot] = solid
        else:
            slot = len(self.solids)
            if slot == self.lo.shape[1]:
                self._grow()
            self.solids.append(solid)
        self.lo[:, slot] = solid.lo
        self.hi[:, slot] = solid.hi
        self.slots[solid.region] = slot

    def delete(self, primitive: Primitive) -> None:
        """Empty the slot of a primitive's solid."""
        slot = self.slots.pop(primitive)
        self.solids[slot] = None
        self.lo[:, slot] = np.inf
        self.hi[:, slot] = -np.inf
        self.free.append(slot)

    def near(self, lo: Point, hi: Point) -> list[Solid]:
        """Return the solids whose bounding boxes meet the closed box ``(lo, hi)``."""
        used = len(self.solids)
        mask = (self.lo[0, :used] <= hi[0]) & (self.hi[0, :used] >= lo[0])
        for axis in range(1, len(lo)):
            mask &= self.lo[axis, :used] <= hi[axis]
            mask &= self.hi[axis, :used] >= lo[axis]
        found = [self.solids[slot] for slot in np.flatnonzero(mask).tolist()]
        return [solid for solid in found if solid is not None]

    def _grow(self) -> None:
        """Double the capacity, filling the new slots with empty boxes."""
        dims, capacity = self.lo.shape
        self.lo = np.concatenate([self.lo, np.full((dims, capacity), np.inf)], axis=1)
        self.hi = np.concatenate([self.hi, np.full((dims, capacity), -np.inf)], axis=1)


def bounding_solids(solids: Iterable[Solid], lo: Point, hi: Point) -> list[Solid]:
    """Return the solids whose bounding boxes meet the closed box ``(lo, hi)`` (no index)."""
    return [
        solid
        for solid in solids
        if all(
            s_low <= high and s_high >= low
            for s_low, s_high, low, high in zip(solid.lo, solid.hi, lo, hi, strict=True)
        )
    ]
