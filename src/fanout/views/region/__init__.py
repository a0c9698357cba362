"""Region views: the primitive shapes, their unions and intersections, and regions relative to
an entity.

Founding document [68]-[69]: a spatial subscription names a region of a 2-D or 3-D space; [72]:
it may be relative to the subscriber's own position, which the relay looks up in its state. The
primitives (:class:`Box`, :class:`Sphere`, :class:`Sector`) live in ``views.region.shapes``
and are re-exported here; this module adds :class:`RegionUnion` and :class:`Relative`, which share
their protocol (``dims``, vectorised ``match``, ``bounds()``, ``grow(margin)``, ``str``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from msgspec.structs import force_setattr

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.region.shapes import (
    PRIMITIVES,
    Box,
    Mask,
    Primitive,
    Sector,
    Sphere,
    direction,
    format_number,
    point,
)

__all__ = [
    "PRIMITIVES",
    "REGIONS",
    "AbsoluteRegion",
    "BinnedPoints",
    "Box",
    "Intersection",
    "Primitive",
    "Region",
    "RegionUnion",
    "Relative",
    "Sector",
    "Sphere",
    "direction",
    "enclosing_box",
    "format_entity",
    "format_number",
]


class RegionUnion(ViewBase, tag="union", frozen=True):
    """The union of one or more primitive regions of the same dimension.

    Nested unions are flattened, so ``RegionUnion([a, RegionUnion([b, c])])`` equals
    ``RegionUnion([a, b, c])``.

    Raises:
        InvalidView: no members, a member that is not a box, sphere or sector, or members of
            different dimensions.
    """

    members: tuple[Box | Sphere | Sector, ...]

    def __post_init__(self) -> None:
        members = tuple(_flatten_members(self.members))
        if not members:
            raise InvalidView("union: needs at least one member")
        for i, member in enumerate(members):
            if member.dims != members[0].dims:
                raise InvalidView(
                    f"union: member {i} is {member.dims}-D but member 0 is {members[0].dims}-D"
                )
        force_setattr(self, "members", members)

    def __str__(self) -> str:
        return "|".join(str(member) for member in self.members)

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return self.members[0].dims

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Return a boolean mask of the points inside any member.

        Many members over many points (a relay below's primitives over a tick's rows): the
        points are binned by x once and each member tests only those in the bins of its
        bounds' x-range, not every point (the sum of the members' shares of the points, not their
        number times all of them)."""
        if len(self.members) >= SORTED_FROM:
            points = BinnedPoints.of(xs, ys, zs)
            if points is not None:
                return self.match_binned(points)
        mask = self.members[0].match(xs, ys, zs)
        for member in self.members[1:]:
            mask = mask | member.match(xs, ys, zs)
        return mask

    def match_binned(self, points: BinnedPoints) -> Mask:
        """``match`` over points binned by x already (``BinnedPoints``, shared by the unions
        asked of the same points), a member at a time on the run of bins of its x-range."""
        sx, sy, sz = points.x, points.y, points.z
        bounds = [member.bounds() for member in self.members]
        starts, stops = points.runs([box.lo[0] for box in bounds], [box.hi[0] for box in bounds])
        hit = np.zeros(len(sx), dtype=np.bool_)
        for member, start, stop in zip(self.members, starts, stops, strict=True):
            near = slice(start, stop)
            hit[near] |= member.match(sx[near], sy[near], None if sz is None else sz[near])
        mask = np.empty(len(sx), dtype=np.bool_)
        mask[points.order] = hit
        return mask

    def bounds(self) -> Box:
        """Return the smallest box holding every member."""
        return enclosing_box([member.bounds() for member in self.members])

    def grow(self, margin: float) -> RegionUnion:
        """Return the union of the members each grown by ``margin``."""
        return RegionUnion(tuple(member.grow(margin) for member in self.members))

    def translate(self, offset: Sequence[float]) -> RegionUnion:
        """Return the union moved by ``offset``."""
        return RegionUnion(tuple(member.translate(offset) for member in self.members))


#: Members and points from which ``RegionUnion.match`` bins the points by x first.
SORTED_FROM = 8
#: Bins along x at most (bin numbers fit 16 bits: numpy's stable sort of them is a radix
#: sort), and points a bin aims for.
BINS, PER_BIN = 4096, 16


class BinnedPoints:
    """Points in order of their x, binned (NaNs in no bin: outside every range), with their y
    (and z): a union's member finds its candidates in the run of the bins its x-range touches.
    Made once for points many unions are asked of (a batch's rows, cut for each relay below).
    Binning is a counting sort (a stable sort of 16-bit bin numbers), not a sort of the x's."""

    def __init__(self, x: npt.NDArray[Any], y: npt.NDArray[Any], z: npt.NDArray[Any] | None):
        finite = np.isfinite(x)
        self.bins = max(1, min(BINS, len(x) // PER_BIN))
        seen = x[finite]
        self.lo = float(seen.min()) if len(seen) else 0.0
        span = float(seen.max()) - self.lo if len(seen) else 0.0
        self.width = span / self.bins if span > 0 else 1.0
        numbers = self._bin(x)
        numbers[np.isnan(x)] = self.bins  # past every real bin: never in a run
        self.order = np.argsort(numbers.astype(np.uint16), kind="stable")
        counts = np.bincount(numbers, minlength=self.bins + 1)
        self.starts = np.zeros(self.bins + 2, dtype=np.intp)
        np.cumsum(counts, out=self.starts[1:])
        self.x, self.y = x[self.order], y[self.order]
        self.z = None if z is None else z[self.order]

    def _bin(self, values: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
        """The bin of each value: non-decreasing in the value (infinities in the end bins),
        the same formula for points and for bounds, so a range's points lie in its bins."""
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            raw = np.floor((np.asarray(values, dtype=np.float64) - self.lo) / self.width)
        raw = np.nan_to_num(raw, nan=0.0, posinf=self.bins - 1, neginf=0.0)
        return np.clip(raw, 0, self.bins - 1).astype(np.intp)

    def runs(self, lows: Sequence[float], highs: Sequence[float]) -> tuple[list[int], list[int]]:
        """Where the candidates of each x-range ``lows[i]..highs[i]`` start and stop in the
        binned order (empty for a range with a NaN end)."""
        low, high = np.asarray(lows, dtype=np.float64), np.asarray(highs, dtype=np.float64)
        first, last = self._bin(low), self._bin(high)
        first[np.isnan(low)], last[np.isnan(high)] = self.bins, -1
        starts = self.starts[first]
        stops = np.maximum(self.starts[np.maximum(last + 1, 0)], starts)
        return starts.tolist(), stops.tolist()

    @classmethod
    def of(
        cls, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None
    ) -> BinnedPoints | None:
        """The points binned, if they are as many one-dimensional columns of at least
        ``SORTED_FROM`` (None: not worth it, or not columns)."""
        x, y = np.asarray(xs), np.asarray(ys)
        z = None if zs is None else np.asarray(zs)
        columns = (y,) if z is None else (y, z)
        if x.ndim == 1 and len(x) >= SORTED_FROM and all(c.shape == x.shape for c in columns):
            return cls(x.astype(np.float64, copy=False), y, z)
        return None


def _flatten_members(members: object) -> Iterable[Primitive]:
    """Yield the primitives of a union's members, opening nested unions."""
    if isinstance(members, str | bytes) or not isinstance(members, Iterable):
        raise InvalidView(f"union: members = {members!r} is not a sequence of regions")
    for i, member in enumerate(members):
        if isinstance(member, RegionUnion):
            yield from member.members
        elif isinstance(member, PRIMITIVES):
            yield member
        else:
            raise InvalidView(f"union: member {i} = {member!r} is not a box, sphere or sector")


class Intersection(ViewBase, tag="meet", frozen=True):
    """The points inside every one of two or more regions (boxes, spheres, sectors, unions).

    What a subscriber under access rules is served when its view is not inside them
    (``relay.core.rules``): its view intersected with the union of its rules. Nested intersections
    are flattened. Its bounds are the intersection of its parts' bounds; for coverage it is
    taken as that box (``views.region.cover``), which holds it.

    Raises:
        InvalidView: fewer than two parts, a part that is not an absolute region, parts of
            different dimensions, or parts whose bounding boxes do not meet (the
            intersection is certainly empty).
    """

    parts: tuple[Box | Sphere | Sector | RegionUnion, ...]

    def __post_init__(self) -> None:
        parts = tuple(_flatten_parts(self.parts))
        if len(parts) < 2:
            raise InvalidView("intersection: needs at least two regions")
        for i, part in enumerate(parts):
            if part.dims != parts[0].dims:
                raise InvalidView(
                    f"intersection: part {i} is {part.dims}-D but part 0 is {parts[0].dims}-D"
                )
        force_setattr(self, "parts", parts)
        if meet_bounds([part.bounds() for part in parts]) is None:
            raise InvalidView(f"intersection: {self} is empty (its parts' bounds do not meet)")

    def __str__(self) -> str:
        return "&".join(str(part) for part in self.parts)

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return self.parts[0].dims

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Return a boolean mask of the points inside every part."""
        mask = self.parts[0].match(xs, ys, zs)
        for part in self.parts[1:]:
            mask = mask & part.match(xs, ys, zs)
        return mask

    def bounds(self) -> Box:
        """Return the intersection of the parts' bounding boxes (which holds every point)."""
        box = meet_bounds([part.bounds() for part in self.parts])
        assert box is not None  # checked when made
        return box

    def grow(self, margin: float) -> Intersection:
        """Return the intersection of the parts each grown by ``margin`` (it holds every point
        within ``margin`` of this one)."""
        return Intersection(tuple(part.grow(margin) for part in self.parts))

    def translate(self, offset: Sequence[float]) -> Intersection:
        """Return the intersection moved by ``offset``."""
        return Intersection(tuple(part.translate(offset) for part in self.parts))


def _flatten_parts(parts: object) -> Iterable[Box | Sphere | Sector | RegionUnion]:
    """Yield the parts of an intersection's parts, opening nested intersections."""
    if isinstance(parts, str | bytes) or not isinstance(parts, Iterable):
        raise InvalidView(f"intersection: parts = {parts!r} is not a sequence of regions")
    for i, part in enumerate(parts):
        if isinstance(part, Intersection):
            yield from part.parts
        elif isinstance(part, (*PRIMITIVES, RegionUnion)):
            yield part
        else:
            raise InvalidView(
                f"intersection: part {i} = {part!r} is not a box, sphere, sector or union"
            )


def meet_bounds(boxes: Sequence[Box]) -> Box | None:
    """The intersection of closed boxes of one dimension (touching boxes meet in a flat box),
    or None if they have no point in common."""
    lo = tuple(max(axis) for axis in zip(*(box.lo for box in boxes), strict=True))
    hi = tuple(min(axis) for axis in zip(*(box.hi for box in boxes), strict=True))
    if any(low > high for low, high in zip(lo, hi, strict=True)):
        return None
    return Box(lo, hi)


AbsoluteRegion: TypeAlias = Box | Sphere | Sector | RegionUnion | Intersection
"""A region in the dataset's own coordinates."""


class Relative(ViewBase, tag="relative", frozen=True):
    """A region that follows an entity: ``view`` is in coordinates relative to its position.

    Founding document [72]: "a subscriber process may request to subscribe to content within a
    given radius of its current position without providing its current position", since the
    relay can look the position up in its state. ``Relative(42, Sphere((0, 0), 50))`` is
    "within 50 of entity 42". It matches nothing and covers nothing until resolved.

    Raises:
        InvalidView: ``entity`` is not an int or a non-empty string, or ``view`` is not an
            absolute region.
    """

    entity: int | str
    view: Box | Sphere | Sector | RegionUnion

    def __post_init__(self) -> None:
        entity = self.entity
        if isinstance(entity, bool) or not isinstance(entity, int | str) or entity == "":
            raise InvalidView(
                f"relative: entity = {entity!r} must be an integer or a non-empty string"
            )
        if not isinstance(self.view, (*PRIMITIVES, RegionUnion)):
            raise InvalidView(
                f"relative: view = {self.view!r} must be a box, sphere, sector or union"
            )

    def __str__(self) -> str:
        return f"rel:{format_entity(self.entity)}:{self.view}"

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return self.view.dims

    def resolve(self, position: Sequence[float]) -> AbsoluteRegion:
        """Return the region in absolute coordinates, given the entity's ``position``.

        Raises:
            InvalidView: ``position`` is not ``dims`` finite numbers.
        """
        offset = point("relative", "position", position)
        if len(offset) != self.dims:
            raise InvalidView(
                f"relative: position has {len(offset)} coordinates but the view is {self.dims}-D"
            )
        return self.view.translate(offset)

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Refuse to match: the region's position is unknown until resolved.

        Raises:
            InvalidView: always; call ``resolve(position)`` first.
        """
        raise InvalidView(f"{self}: resolve(position) the relative view before matching")

    def bounds(self) -> Box:
        """Refuse: the region's position is unknown until resolved.

        Raises:
            InvalidView: always; call ``resolve(position)`` first.
        """
        raise InvalidView(f"{self}: resolve(position) the relative view before bounding it")

    def grow(self, margin: float) -> Relative:
        """Return the relative view with its region grown by ``margin``."""
        return Relative(self.entity, self.view.grow(margin))


def format_entity(entity: int | str) -> str:
    """Return the text form of an entity key: digits for an int, else the string.

    A string that would read back as something else (digits, or characters the text syntax
    uses) is written as a JSON string.
    """
    if isinstance(entity, int):
        return str(entity)
    if _is_bare_key(entity):
        return entity
    return json.dumps(entity)


def _is_bare_key(key: str) -> bool:
    """Whether a string key can be written without quotes in the text syntax."""
    try:
        int(key)
    except ValueError:
        return all(ch.isalnum() or ch in "_-." for ch in key) and key.isascii()
    return False


Region: TypeAlias = Box | Sphere | Sector | RegionUnion | Intersection | Relative
"""Every region view."""

REGIONS = (Box, Sphere, Sector, RegionUnion, Intersection, Relative)


def enclosing_box(boxes: Sequence[Box]) -> Box:
    """Return the smallest box holding every box in ``boxes``.

    Raises:
        InvalidView: ``boxes`` is empty or mixes 2-D and 3-D.
    """
    if not boxes:
        raise InvalidView("bounding box of no regions: give at least one")
    dims = boxes[0].dims
    for i, box in enumerate(boxes):
        if box.dims != dims:
            raise InvalidView(f"bounding box: region {i} is {box.dims}-D but region 0 is {dims}-D")
    lo = tuple(min(box.lo[axis] for box in boxes) for axis in range(dims))
    hi = tuple(max(box.hi[axis] for box in boxes) for axis in range(dims))
    return Box(lo, hi)
