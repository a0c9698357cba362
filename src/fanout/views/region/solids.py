"""Solids: regions prepared for the coverage algebra's cell tests.

Each solid is an intersection of *constraints* (a box, a half-space, a ball, a cone around an
axis) and answers for a cell (an axis-aligned box) with one-sided rules, which keep ``covers``
from ever saying True wrongly (up to floating-point rounding at shared boundaries):

* ``meets_cell`` may say True for a cell outside, never False for one that meets it;
* ``contains_cell`` may say False for a cell inside, never True for one that is not.

A held solid covers a view's part of a cell when each of its constraints holds the cell or is
implied by one of the view's (:func:`active_constraints`): a sector held with the view's radius
covers the cells the view's arc cuts.
"""

from __future__ import annotations

import itertools
import math
from typing import TypeAlias

from fanout.views.region import Box, Primitive, Sector, Sphere, cells
from fanout.views.region.shapes import distance_scale

Point: TypeAlias = tuple[float, ...]

# Slack on the side that keeps a test one-sided despite rounding: angle cosines in meets_cell,
# and what counts as the same boundary in `implies` (directions computed from headings that
# differ in the last bit, as 0.3 + 0.3 and 0.6 do).
_SLACK = 1e-12


class BoxConstraint:
    """Inside an axis-aligned box."""

    __slots__ = ("hi", "lo")

    def __init__(self, lo: Point, hi: Point) -> None:
        self.lo, self.hi = lo, hi

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        return cells.contains(self.lo, self.hi, lo, hi)


class HalfSpace:
    """On the inner side of a plane: ``normal . (p - point) <= 0``, ``normal`` a unit vector."""

    __slots__ = ("normal", "point")

    def __init__(self, normal: Point, point: Point) -> None:
        self.normal, self.point = normal, point

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the cell's corner farthest along the normal is inside (it is linear)."""
        extreme = sum(
            n * ((high if n > 0 else low) - p)
            for n, low, high, p in zip(self.normal, lo, hi, self.point, strict=True)
        )
        return extreme <= 0


class BallConstraint:
    """Within ``radius`` of ``center``.

    Distances are compared scaled by ``distance_scale(radius)``, as ``Sphere.match`` does:
    unscaled, the squares of a huge radius and of a far corner are both infinite.
    """

    __slots__ = ("center", "radius", "scale", "squared")

    def __init__(self, center: Point, radius: float) -> None:
        self.center, self.radius = center, radius
        self.scale = distance_scale(radius)
        reach = radius * self.scale
        self.squared = reach * reach

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the cell's farthest corner is within the radius (the ball is convex)."""
        return _farthest_squared(self.center, lo, hi, self.scale) <= self.squared

    def meets_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the cell's nearest point is within the radius."""
        return _nearest_squared(self.center, lo, hi, self.scale) <= self.squared


class ConeConstraint:
    """Within ``half_angle`` of ``axis`` as seen from ``apex`` (apex included), unbounded."""

    __slots__ = ("apex", "axis", "cos_half", "half_angle")

    def __init__(self, apex: Point, axis: Point, half_angle: float) -> None:
        self.apex, self.axis, self.half_angle = apex, axis, half_angle
        self.cos_half = math.cos(half_angle)

    @property
    def convex(self) -> bool:
        return self.half_angle <= math.pi / 2

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        """Whether every direction from the apex into the cell is within the half-angle.

        A cone of half-angle at most pi/2 is convex, so its corners decide. A wider cone is the
        complement of the open cone of half-angle ``pi - half_angle`` around the opposite
        direction, so the cell is inside when its directions stay out of that cone (or when it
        lies in the half-space ahead of the apex).
        """
        corners = [_offset(corner, self.apex) for corner in _corners(lo, hi)]
        if self.convex:
            return all(self.holds(corner) for corner in corners)
        if all(_dot(corner, self.axis) >= 0 for corner in corners):
            return True
        behind = tuple(-a for a in self.axis)
        return _max_cosine(behind, self.apex, lo, hi) <= -self.cos_half - _SLACK

    def holds(self, offset: Point) -> bool:
        """The angle test of ``Sector.match`` for one offset from the apex (scaled by a power of
        two, which changes no rounding, so that its squared length neither overflows nor
        underflows)."""
        scale = distance_scale(max(abs(v) for v in offset))
        offset = tuple(v * scale for v in offset)
        return _dot(offset, self.axis) >= math.sqrt(_dot(offset, offset)) * self.cos_half


Constraint: TypeAlias = BoxConstraint | HalfSpace | BallConstraint | ConeConstraint


class CellSolid:
    """A box, tested exactly."""

    __slots__ = ("constraints", "hi", "implying", "lo", "region")

    def __init__(self, region: Box) -> None:
        self.region = region
        self.lo: Point = region.lo
        self.hi: Point = region.hi
        self.constraints: tuple[Constraint, ...] = (BoxConstraint(self.lo, self.hi),)
        self.implying = self.constraints

    def meets_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the box overlaps the cell by more than a shared face (see cells.meets)."""
        return cells.meets(self.lo, self.hi, lo, hi)

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        return cells.contains(self.lo, self.hi, lo, hi)

    def faces(self) -> tuple[HalfSpace, ...]:
        """Return the box as 2 * dims half-spaces, to test them one at a time."""
        found = []
        for axis in range(len(self.lo)):
            unit = tuple(1.0 if i == axis else 0.0 for i in range(len(self.lo)))
            found.append(HalfSpace(unit, self.hi))
            found.append(HalfSpace(tuple(-u for u in unit), self.lo))
        return tuple(found)


class BallSolid:
    """A sphere (disc in 2-D)."""

    __slots__ = ("ball", "constraints", "hi", "implying", "lo", "region")

    def __init__(self, region: Sphere) -> None:
        self.region = region
        self.ball = BallConstraint(region.center, region.radius)
        self.constraints: tuple[Constraint, ...] = (self.ball,)
        self.implying = self.constraints
        bounds = region.bounds()
        self.lo: Point = bounds.lo
        self.hi: Point = bounds.hi

    def meets_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the cell's nearest point is within the radius."""
        return self.ball.meets_cell(lo, hi)

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        return self.ball.contains_cell(lo, hi)


class ConeSolid:
    """A sector (2-D) or spherical cone (3-D): a ball cut by a cone around an axis.

    A 2-D sector of half-angle at most pi/2 is the ball and two half-planes through the apex,
    so that a sector held in two halves shares each outer edge with the whole.
    """

    __slots__ = ("ball", "cone", "constraints", "hi", "implying", "lo", "region")

    def __init__(self, region: Sector) -> None:
        self.region = region
        self.ball = BallConstraint(region.center, region.radius)
        self.cone = ConeConstraint(region.center, region.axis, region.half_angle)
        bounds = region.bounds()
        self.lo: Point = bounds.lo
        self.hi: Point = bounds.hi
        heading = region.heading
        if region.half_angle >= math.pi:
            self.constraints: tuple[Constraint, ...] = (self.ball,)
        elif not isinstance(heading, tuple) and self.cone.convex:
            self.constraints = (self.ball, *_edges(region.center, heading, region.half_angle))
        else:
            self.constraints = (self.ball, self.cone)
        self.implying = (*self.constraints, self.cone)

    def meets_cell(self, lo: Point, hi: Point) -> bool:
        """Whether the cell might share a point with the sector.

        True unless the cell is certainly outside the ball or certainly outside the cone.
        """
        if not self.ball.meets_cell(lo, hi):
            return False
        if self.region.half_angle >= math.pi:
            return True
        cone = self.cone
        spread = _angular_spread(cone.axis, cone.apex, lo, hi)
        if spread is not None:
            lowest, highest = spread
            if lowest > cone.half_angle + _SLACK:
                return False
            if highest <= cone.half_angle:
                return True
        return _max_cosine(cone.axis, cone.apex, lo, hi) >= cone.cos_half - _SLACK

    def contains_cell(self, lo: Point, hi: Point) -> bool:
        return all(constraint.contains_cell(lo, hi) for constraint in self.constraints)


Solid: TypeAlias = CellSolid | BallSolid | ConeSolid


def solid_of(region: Primitive) -> Solid:
    """Return the solid of a primitive region."""
    if isinstance(region, Box):
        return CellSolid(region)
    if isinstance(region, Sphere):
        return BallSolid(region)
    return ConeSolid(region)


def active_constraints(have: Solid, view: Solid) -> tuple[Constraint, ...]:
    """Return the constraints of ``have`` that a cell must satisfy for ``have`` to cover the
    view's part of it: those not already implied by one of the view's own constraints.

    Empty when ``have`` contains the whole view.
    """
    if have.contains_cell(view.lo, view.hi):
        return ()
    if isinstance(have, CellSolid) and isinstance(view, CellSolid):
        return have.constraints
    mine = have.faces() if isinstance(have, CellSolid) else have.constraints
    return tuple(
        constraint
        for constraint in mine
        if not any(implies(own, constraint) for own in view.implying)
    )


def implies(inner: Constraint, outer: Constraint) -> bool:
    """Whether every point satisfying ``inner`` satisfies ``outer`` (a sufficient test)."""
    if isinstance(inner, BoxConstraint):
        return outer.contains_cell(inner.lo, inner.hi)
    if isinstance(inner, BallConstraint):
        return _ball_implies(inner, outer)
    if isinstance(inner, HalfSpace):
        return isinstance(outer, HalfSpace) and _half_space_implies(inner, outer)
    return _cone_implies(inner, outer)


def _ball_implies(ball: BallConstraint, outer: Constraint) -> bool:
    if isinstance(outer, BallConstraint):
        return math.dist(ball.center, outer.center) + ball.radius <= outer.radius
    if isinstance(outer, HalfSpace):
        return _dot(outer.normal, _offset(ball.center, outer.point)) + ball.radius <= 0
    if isinstance(outer, ConeConstraint):
        distance = math.dist(ball.center, outer.apex)
        if distance <= ball.radius:
            return False
        spread = math.asin(ball.radius / distance)
        return _angle(_offset(ball.center, outer.apex), outer.axis) + spread <= outer.half_angle
    lo = tuple(c - ball.radius for c in ball.center)
    hi = tuple(c + ball.radius for c in ball.center)
    return outer.contains_cell(lo, hi)


def _half_space_implies(inner: HalfSpace, outer: HalfSpace) -> bool:
    """Parallel planes, the inner one not beyond the outer one."""
    if any(abs(a - b) > _SLACK for a, b in zip(inner.normal, outer.normal, strict=True)):
        return False
    gap = _dot(outer.normal, _offset(inner.point, outer.point))
    return gap <= _SLACK * (1.0 + math.hypot(*inner.point))


def _cone_implies(cone: ConeConstraint, outer: Constraint) -> bool:
    if isinstance(outer, HalfSpace):
        # The apex inside, and every direction of the cone pointing away from the plane.
        apex_inside = _dot(outer.normal, _offset(cone.apex, outer.point)) <= 0
        return apex_inside and _angle(cone.axis, outer.normal) >= math.pi / 2 + cone.half_angle
    if not isinstance(outer, ConeConstraint):
        return False
    if _angle(cone.axis, outer.axis) + cone.half_angle > outer.half_angle + _SLACK:
        return False
    if cone.apex == outer.apex:
        return True
    # A convex cone holds every translate of its sub-cones whose apex it holds.
    return outer.convex and outer.holds(_offset(cone.apex, outer.apex))


def _edges(apex: Point, heading: float, half_angle: float) -> tuple[HalfSpace, HalfSpace]:
    """Return a 2-D sector's two edges (half-angle at most pi/2) as half-planes."""
    upper, lower = heading + half_angle, heading - half_angle
    return (
        HalfSpace((-math.sin(upper), math.cos(upper)), apex),
        HalfSpace((math.sin(lower), -math.cos(lower)), apex),
    )


def _corners(lo: Point, hi: Point) -> list[Point]:
    """Return the 2**dims corners of a cell."""
    return [tuple(corner) for corner in itertools.product(*zip(lo, hi, strict=True))]


def _offset(point: Point, origin: Point) -> Point:
    return tuple(p - o for p, o in zip(point, origin, strict=True))


def _dot(u: Point, v: Point) -> float:
    # Spelled out: this is the innermost operation of the cone tests.
    if len(u) == 2:
        return u[0] * v[0] + u[1] * v[1]
    return u[0] * v[0] + u[1] * v[1] + u[2] * v[2]


def _angle(u: Point, v: Point) -> float:
    """Return the angle between two non-zero vectors, in [0, pi].

    atan2 of the cross and dot products, not acos of the cosine: acos loses half the digits
    near 0, and equal directions must give exactly 0 for a sector to contain itself.
    """
    if len(u) == 2:
        cross = abs(u[0] * v[1] - u[1] * v[0])
    else:
        cross = math.hypot(
            u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]
        )
    return math.atan2(cross, _dot(u, v))


def _farthest_squared(center: Point, lo: Point, hi: Point, scale: float) -> float:
    """Return the squared distance from ``center`` to the cell's farthest corner, the offsets
    times ``scale``.

    Computed as ``Sphere.match`` does and summed in the same order, so a cell whose farthest
    corner passes holds only points that pass.
    """
    total = 0.0
    for c, low, high in zip(center, lo, hi, strict=True):
        near, far = (low - c) * scale, (high - c) * scale
        total += max(near * near, far * far)  # ``**`` raises on overflow
    return total


def _nearest_squared(center: Point, lo: Point, hi: Point, scale: float) -> float:
    """Return the squared distance from ``center`` to the cell's nearest point, the offsets
    times ``scale``."""
    total = 0.0
    for c, low, high in zip(center, lo, hi, strict=True):
        gap = (min(max(c, low), high) - c) * scale
        total += gap * gap
    return total


def _max_cosine(axis: Point, apex: Point, lo: Point, hi: Point) -> float:
    """Return the largest cosine of the angle between ``axis`` and ``p - apex`` over the cell.

    1.0 when the ray from ``apex`` along ``axis`` enters the cell (which includes a cell
    holding the apex). Otherwise the best direction lies on the boundary of the cone the cell
    spans from the apex: along a corner, or (in 3-D) inside a face of that cone, which is
    spanned by the two corners of an edge of the cell, where it is the projection of ``axis``
    onto the face's plane.
    """
    near = _offset(lo, apex)
    far = _offset(hi, apex)
    if _ray_enters(axis, near, far):
        return 1.0
    units = [_unit(corner) for corner in _corners(near, far)]
    best = max(_dot(axis, unit) for unit in units)
    if len(axis) == 3:
        for first, second in _EDGES_3D:
            best = max(best, _face_cosine(axis, units[first], units[second]))
    return best


# The edges of a 3-D cell, as pairs of indices into _corners (corners that differ on one axis).
_EDGES_3D = tuple(
    (first, second)
    for first, second in itertools.combinations(range(8), 2)
    if bin(first ^ second).count("1") == 1
)


def _angular_spread(axis: Point, apex: Point, lo: Point, hi: Point) -> tuple[float, float] | None:
    """Return bounds on the angle from ``axis`` to ``p - apex`` over the cell, or None.

    Cheap and loose: the cell lies in the ball around its centre through its corners, which
    is seen from the apex within ``asin(radius / distance)`` of the centre's direction. None
    when the apex is inside that ball.
    """
    middle = tuple(cells.midpoint(low, high) - a for low, high, a in zip(lo, hi, apex, strict=True))
    radius = math.dist(lo, hi) / 2
    distance = math.hypot(*middle)
    if distance <= radius * (1 + _SLACK):
        return None
    spread = math.asin(radius / distance)
    angle = _angle(middle, axis)
    return angle - spread - _SLACK, angle + spread + _SLACK


def _unit(vector: Point) -> Point:
    length = math.hypot(*vector)
    return tuple(v / length for v in vector)


def _ray_enters(axis: Point, near: Point, far: Point) -> bool:
    """Whether the ray ``t * axis`` (t >= 0) meets the cell ``(near, far)`` (slab test)."""
    enter, leave = 0.0, math.inf
    for a, low, high in zip(axis, near, far, strict=True):
        if a == 0:
            if not low <= 0 <= high:
                return False
            continue
        first, second = sorted((low / a, high / a))
        enter, leave = max(enter, first), min(leave, second)
    return enter <= leave


def _face_cosine(axis: Point, first: Point, second: Point) -> float:
    """Return cos of the angle from ``axis`` to the cone of two unit vectors, if the nearest
    direction is strictly between them; else -1 (the corners themselves were tried)."""
    between = _dot(first, second)
    determinant = 1.0 - between * between
    if determinant <= 1e-15:
        return -1.0
    along_first, along_second = _dot(axis, first), _dot(axis, second)
    weight_first = (along_first - between * along_second) / determinant
    weight_second = (along_second - between * along_first) / determinant
    if weight_first < 0 or weight_second < 0:
        return -1.0
    return math.sqrt(max(0.0, weight_first * along_first + weight_second * along_second))
