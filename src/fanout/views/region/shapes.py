"""The primitive regions: boxes, spheres and sectors, in 2-D or 3-D.

Founding document [69]: a spatial subscription names a region by "coordinates defining corners
of a bounding box", "a set of angles defining a circular or spherical sector", or "a position and
a radius". Each is a frozen, tagged msgspec Struct with:

* ``dims`` (2 or 3) and a vectorised ``match(xs, ys, zs=None)`` on numpy arrays;
* ``bounds()``, the smallest axis-aligned :class:`Box` holding it;
* ``grow(margin)``, a region of the same shape holding every point within ``margin`` of it;
* ``translate(offset)`` and ``measure()`` (area or volume);
* ``str(region)``, its text form (``box:0,0,10,10``; see :mod:`fanout.views.text`).

Regions are closed sets: a point on the boundary matches. Membership is decided by the same
floating-point formulas everywhere, so points within a few ulps of a boundary may go either way.
Unions and regions relative to an entity are in :mod:`fanout.views.region`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from numbers import Real
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from msgspec.structs import force_setattr

from fanout.errors import InvalidView
from fanout.views.base import ViewBase

Point: TypeAlias = tuple[float, ...]
Mask: TypeAlias = npt.NDArray[np.bool_]
Floats: TypeAlias = npt.NDArray[np.float64]

# Reaches below this fraction of a sector's radius are rounding noise of cos() around pi/2;
# snapping them to zero keeps a half-disc's bounds flush with its apex.
_REACH_NOISE = 1e-12


def format_number(value: float) -> str:
    """Return the shortest text that reads back as exactly ``value`` (``10``, not ``10.0``)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _number(owner: str, name: str, value: object) -> float:
    """Return ``value`` as a finite float, or raise InvalidView naming ``owner.name``."""
    if type(value) is float and math.isfinite(value):  # the usual case, checked cheaply
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidView(f"{owner}: {name} = {value!r} is not a number")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidView(f"{owner}: {name} = {number!r} is not finite")
    return number


def point(owner: str, name: str, value: object) -> Point:
    """Return ``value`` as a tuple of 2 or 3 finite floats, or raise InvalidView."""
    if (
        type(value) is tuple
        and len(value) in (2, 3)
        and all(type(v) is float for v in value)
        and all(map(math.isfinite, value))
    ):  # the usual case (views are made by the thousand a second), checked cheaply
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidView(f"{owner}: {name} = {value!r} is not a sequence of coordinates")
    coords = tuple(_number(owner, f"{name}[{i}]", item) for i, item in enumerate(value))
    if len(coords) not in (2, 3):
        raise InvalidView(f"{owner}: {name} has {len(coords)} coordinates; regions are 2-D or 3-D")
    return coords


def _radius(owner: str, value: object) -> float:
    """Return ``value`` as a finite, non-negative radius, or raise InvalidView."""
    radius = _number(owner, "radius", value)
    if radius < 0:
        raise InvalidView(f"{owner}: radius = {radius!r} is negative")
    return radius


def _margin(owner: str, value: object) -> float:
    """Return ``value`` as a finite, non-negative margin for ``grow``, or raise InvalidView."""
    margin = _number(owner, "margin", value)
    if margin < 0:
        raise InvalidView(f"{owner}: margin = {margin!r} is negative; grow only widens")
    return margin


def _coordinates(
    dims: int, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None
) -> list[Floats]:
    """Return the coordinate arrays a ``dims``-dimensional region needs, as float arrays.

    A 2-D region ignores ``zs`` (it matches on x and y whatever the height); a 3-D region
    needs it.

    Raises:
        InvalidView: a 3-D region was given no ``zs``.
    """
    columns = [np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)]
    if dims == 3:
        if zs is None:
            raise InvalidView("a 3-D region needs zs to match points")
        columns.append(np.asarray(zs, dtype=np.float64))
    return columns


def _clamped(value: float) -> float:
    """``value`` within the finite floats (a bound past them holds every finite point)."""
    return max(-sys.float_info.max, min(value, sys.float_info.max))


#: Lengths between these square well inside the floats (no overflow, no underflow).
SAFE_SMALL, SAFE_BIG = 2.0**-500, 2.0**500
#: The angle test (``Sector.match``) does not depend on the offset's length, so an offset whose
#: largest component is above ``SAFE_BIG`` is multiplied by ``SHRINK``, and one below
#: ``SAFE_SMALL`` by ``STRETCH``: powers of two, exact, and the same literals in Spark.
SHRINK, STRETCH = 2.0**-600, 2.0**600


def distance_scale(radius: float) -> float:
    """The power of two offsets from a sphere's (or a sector's) center are multiplied by before
    they are squared: 1 for a radius between 2**-500 and 2**500, else the one that brings the
    radius into [0.5, 1) (as near as the floats allow).

    A sphere holds the points whose squared distance from the center is at most the squared
    radius. Unscaled, squares overflow past about 1.3e154, so every far point was "inside" a
    huge sphere (inf <= inf), and underflow below about 1.5e-154, so near points were inside a
    tiny one (0 <= 0). A power of two changes the exponents and no rounding, and brings the
    offsets that decide the test near 1. Between 2**-500 and 2**500 the squares of those
    offsets are already well inside the floats (an offset whose square overflows is beyond the
    radius anyway, one whose square underflows within it), so nothing is multiplied. A radius
    of 0 takes the largest scale, so that no offset but 0 squares to 0. The relay (``match``),
    the publisher's Spark refine and the coverage algebra's solids all scale by it.
    """
    if SAFE_SMALL <= radius <= SAFE_BIG:
        return 1.0
    exponent = math.frexp(radius)[1] if radius else -1074
    return math.ldexp(1.0, min(max(-exponent, -1022), 1023))


# The helpers below run under ``np.errstate(all="ignore")``, set once by each ``match``:
# beyond the floats an offset is infinite (or NaN for NaN coordinates), and squares of offsets
# far smaller than what decides the test underflow.


def _offsets(columns: list[Floats], center: Point) -> list[Floats]:
    """Each point's offset from ``center`` on each axis."""
    return [column - c for column, c in zip(columns, center, strict=True)]


def _squared(offsets: list[Floats]) -> Floats:
    """The squared length of each offset, summed axis by axis."""
    total = offsets[0] * offsets[0]
    for offset in offsets[1:]:
        total = total + offset * offset
    return total


def _within(offsets: list[Floats], radius: float) -> Mask:
    """Whether each offset is at most ``radius`` long (compared scaled: ``distance_scale``)."""
    scale = distance_scale(radius)
    if scale != 1.0:
        offsets = [offset * scale for offset in offsets]
    reach = radius * scale
    return np.asarray(_squared(offsets) <= reach * reach, dtype=np.bool_)


def _cone_scaled(offsets: list[Floats]) -> list[Floats]:
    """The offsets, each point's multiplied by its power of two for the angle test (see
    ``SAFE_BIG``); as they are when none needs one."""
    largest = np.abs(offsets[0])
    for offset in offsets[1:]:
        largest = np.fmax(largest, np.abs(offset))
    if largest.size and largest.min() >= SAFE_SMALL and largest.max() <= SAFE_BIG:
        return offsets
    scale = np.where(largest > SAFE_BIG, SHRINK, np.where(largest < SAFE_SMALL, STRETCH, 1.0))
    return [offset * scale for offset in offsets]


def direction(dims: int, heading: float | tuple[float, float]) -> Point:
    """Return the unit vector of a sector's heading.

    Args:
        dims: 2 or 3.
        heading: in 2-D an angle from +x toward +y; in 3-D ``(azimuth, elevation)``, azimuth
            from +x toward +y in the x-y plane and elevation toward +z, all in radians.

    Returns:
        The unit vector, of ``dims`` components.
    """
    if isinstance(heading, tuple):
        azimuth, elevation = heading
        return (
            math.cos(elevation) * math.cos(azimuth),
            math.cos(elevation) * math.sin(azimuth),
            math.sin(elevation),
        )
    return (math.cos(heading), math.sin(heading))


class Box(ViewBase, tag="box", frozen=True):
    """An axis-aligned box: every point with ``lo[i] <= p[i] <= hi[i]`` on each axis ([69]).

    ``Box([0, 0], [10, 10])`` and ``Box((0.0, 0.0), (10.0, 10.0))`` are equal and hash equal.
    A box may be flat (``lo[i] == hi[i]``); it is then a face, an edge or a point.

    Raises:
        InvalidView: coordinates not finite numbers, not 2 or 3 of them, ``lo`` and ``hi`` of
            different lengths, or ``lo[i] > hi[i]``.
    """

    lo: tuple[float, ...]
    hi: tuple[float, ...]

    def __post_init__(self) -> None:
        lo = point("box", "lo", self.lo)
        hi = point("box", "hi", self.hi)
        if len(lo) != len(hi):
            raise InvalidView(f"box: lo has {len(lo)} coordinates but hi has {len(hi)}")
        for axis, (low, high) in enumerate(zip(lo, hi, strict=True)):
            if low > high:
                raise InvalidView(
                    f"box: lo[{axis}] = {low!r} is greater than hi[{axis}] = {high!r}"
                )
        force_setattr(self, "lo", lo)
        force_setattr(self, "hi", hi)

    def __str__(self) -> str:
        return "box:" + ",".join(format_number(v) for v in self.lo + self.hi)

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return len(self.lo)

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Return a boolean mask of the points inside the box (boundary included)."""
        columns = _coordinates(self.dims, xs, ys, zs)
        mask = (columns[0] >= self.lo[0]) & (columns[0] <= self.hi[0])
        for column, low, high in zip(columns[1:], self.lo[1:], self.hi[1:], strict=True):
            mask = mask & (column >= low) & (column <= high)
        return np.asarray(mask, dtype=np.bool_)

    def bounds(self) -> Box:
        """Return the box itself: it is its own bounding box."""
        return self

    def grow(self, margin: float) -> Box:
        """Return the box widened by ``margin`` on every side.

        Raises:
            InvalidView: ``margin`` is negative or not finite.
        """
        margin = _margin("box", margin)
        return Box(tuple(v - margin for v in self.lo), tuple(v + margin for v in self.hi))

    def translate(self, offset: Sequence[float]) -> Box:
        """Return the box moved by ``offset`` (one component per axis)."""
        return Box(
            tuple(v + d for v, d in zip(self.lo, offset, strict=True)),
            tuple(v + d for v, d in zip(self.hi, offset, strict=True)),
        )

    def measure(self) -> float:
        """Return the box's area (2-D) or volume (3-D)."""
        return math.prod(high - low for low, high in zip(self.lo, self.hi, strict=True))


class Sphere(ViewBase, tag="sphere", frozen=True):
    """Every point within ``radius`` of ``center`` ([69]); a disc in 2-D.

    Raises:
        InvalidView: the center is not 2 or 3 finite numbers, or the radius is negative or
            not finite.
    """

    center: tuple[float, ...]
    radius: float

    def __post_init__(self) -> None:
        force_setattr(self, "center", point("sphere", "center", self.center))
        force_setattr(self, "radius", _radius("sphere", self.radius))

    def __str__(self) -> str:
        return "sphere:" + ",".join(format_number(v) for v in (*self.center, self.radius))

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return len(self.center)

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Return a boolean mask of the points within the radius (boundary included)."""
        columns = _coordinates(self.dims, xs, ys, zs)
        with np.errstate(all="ignore"):  # see ``_offsets``
            return _within(_offsets(columns, self.center), self.radius)

    def bounds(self) -> Box:
        """Return the cube (square in 2-D) circumscribing the sphere (clamped to the floats)."""
        return Box(
            tuple(_clamped(c - self.radius) for c in self.center),
            tuple(_clamped(c + self.radius) for c in self.center),
        )

    def grow(self, margin: float) -> Sphere:
        """Return the sphere with its radius lengthened by ``margin``.

        Raises:
            InvalidView: ``margin`` is negative or not finite.
        """
        return Sphere(self.center, self.radius + _margin("sphere", margin))

    def translate(self, offset: Sequence[float]) -> Sphere:
        """Return the sphere moved by ``offset``."""
        center = tuple(c + d for c, d in zip(self.center, offset, strict=True))
        return Sphere(center, self.radius)

    def measure(self) -> float:
        """Return the disc's area (2-D) or the ball's volume (3-D)."""
        if self.dims == 2:
            return math.pi * self.radius * self.radius  # ``**`` raises on overflow, ``*`` is inf
        return 4.0 / 3.0 * math.pi * self.radius * self.radius * self.radius


class Sector(ViewBase, tag="sector", frozen=True):
    """A circular sector (2-D) or spherical cone (3-D): [69]'s "set of angles".

    The points within ``radius`` of ``center`` whose direction from ``center`` is at most
    ``half_angle`` from ``heading``. In 2-D ``heading`` is an angle in radians from +x toward
    +y; in 3-D it is ``(azimuth, elevation)`` in radians (see :func:`direction`). A
    ``half_angle`` of pi is the whole disc or ball. The center itself matches.

    Raises:
        InvalidView: bad center or radius (as for :class:`Sphere`); a heading that is not one
            angle in 2-D or two in 3-D, or not finite; ``half_angle`` outside (0, pi].
    """

    center: tuple[float, ...]
    radius: float
    heading: float | tuple[float, float]
    half_angle: float

    def __post_init__(self) -> None:
        center = point("sector", "center", self.center)
        force_setattr(self, "center", center)
        force_setattr(self, "radius", _radius("sector", self.radius))
        force_setattr(self, "heading", _heading(len(center), self.heading))
        half_angle = _number("sector", "half_angle", self.half_angle)
        if not 0 < half_angle <= math.pi:
            raise InvalidView(f"sector: half_angle = {half_angle!r} is outside (0, pi]")
        force_setattr(self, "half_angle", half_angle)

    def __str__(self) -> str:
        heading = self.heading if isinstance(self.heading, tuple) else (self.heading,)
        numbers = (*self.center, self.radius, *heading, self.half_angle)
        return "sector:" + ",".join(format_number(v) for v in numbers)

    @property
    def dims(self) -> int:
        """The number of axes, 2 or 3."""
        return len(self.center)

    @property
    def axis(self) -> Point:
        """The unit vector of the heading."""
        return direction(self.dims, self.heading)

    def match(self, xs: npt.ArrayLike, ys: npt.ArrayLike, zs: npt.ArrayLike | None = None) -> Mask:
        """Return a boolean mask of the points inside the sector (boundary included)."""
        columns = _coordinates(self.dims, xs, ys, zs)
        with np.errstate(all="ignore"):  # see ``_offsets``
            offsets = _offsets(columns, self.center)
            within = _within(offsets, self.radius)
            if self.half_angle >= math.pi:
                return within
            offsets = _cone_scaled(offsets)
            along = sum(
                (offset * a for offset, a in zip(offsets, self.axis, strict=True)),
                start=np.zeros(np.shape(within)),
            )
            # angle(p - c, axis) <= half_angle  <=>  (p - c) . axis >= |p - c| cos(half_angle)
            inside = along >= np.sqrt(_squared(offsets)) * math.cos(self.half_angle)
        return np.asarray(within & inside, dtype=np.bool_)

    def bounds(self) -> Box:
        """Return the smallest box holding the sector.

        Along each axis direction ``e`` the sector reaches the full radius when ``e`` is
        within the half-angle of the heading, else ``radius * cos(angle(e, heading) -
        half_angle)`` along its edge, or nothing (the apex is the extreme point).
        """
        axis = self.axis
        lo: list[float] = []
        hi: list[float] = []
        for i, c in enumerate(self.center):
            hi.append(_clamped(c + self._reach(axis[i])))
            lo.append(_clamped(c - self._reach(-axis[i])))
        return Box(tuple(lo), tuple(hi))

    def _reach(self, cosine: float) -> float:
        """Return how far the sector reaches along a direction at ``acos(cosine)`` to its axis."""
        angle = math.acos(max(-1.0, min(1.0, cosine)))
        if angle <= self.half_angle:
            return self.radius
        reach = self.radius * max(0.0, math.cos(angle - self.half_angle))
        return 0.0 if reach <= self.radius * _REACH_NOISE else reach

    def grow(self, margin: float) -> Sector:
        """Return a sector of the same heading holding every point within ``margin`` of this
        one.

        The apex moves back along the axis by ``margin / sin(half_angle)`` so that each edge
        moves out by ``margin``, and the radius grows by that shift plus ``margin``; or, when
        that is larger, the whole disc or ball of radius ``radius + margin`` around the centre
        (half-angle pi) is returned. A sector nearly as wide as the ball would otherwise move
        its apex back by a great deal (``margin / sin(half_angle)``: 1e16 for a margin of 5 a
        hair under pi) and lose the margin in rounding at that scale. A full disc or ball just
        grows its radius.

        Raises:
            InvalidView: ``margin`` is negative or not finite.
        """
        margin = _margin("sector", margin)
        ball = Sector(self.center, self.radius + margin, self.heading, math.pi)
        if self.half_angle >= math.pi or margin == 0:
            return ball if margin else self
        shift = margin / math.sin(self.half_angle)
        apex = tuple(c - shift * a for c, a in zip(self.center, self.axis, strict=True))
        cone = Sector(apex, self.radius + margin + shift, self.heading, self.half_angle)
        return cone if cone.measure() <= ball.measure() else ball

    def translate(self, offset: Sequence[float]) -> Sector:
        """Return the sector moved by ``offset``; its heading is unchanged."""
        center = tuple(c + d for c, d in zip(self.center, offset, strict=True))
        return Sector(center, self.radius, self.heading, self.half_angle)

    def measure(self) -> float:
        """Return the sector's area (2-D) or the spherical cone's volume (3-D)."""
        if self.dims == 2:
            return self.half_angle * self.radius * self.radius
        cube = self.radius * self.radius * self.radius
        return 2.0 / 3.0 * math.pi * cube * (1.0 - math.cos(self.half_angle))


def _heading(dims: int, value: object) -> float | tuple[float, float]:
    """Return a sector's heading normalised for ``dims``, or raise InvalidView."""
    if dims == 2:
        return _number("sector", "heading", value)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidView(
            f"sector: heading = {value!r} must be (azimuth, elevation) for a 3-D sector"
        )
    angles = tuple(_number("sector", f"heading[{i}]", v) for i, v in enumerate(value))
    if len(angles) != 2:
        raise InvalidView(
            f"sector: heading has {len(angles)} angles; a 3-D sector needs (azimuth, elevation)"
        )
    return (angles[0], angles[1])


Primitive: TypeAlias = Box | Sphere | Sector
"""A region the coverage algebra decomposes directly: one box, sphere or sector."""

PRIMITIVES = (Box, Sphere, Sector)
