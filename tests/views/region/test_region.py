"""Region views: validation, normalisation, wire form, and vectorised matching against a
scalar brute-force formula."""

from __future__ import annotations

import math
from fractions import Fraction

import msgspec
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.testing import strategies as fs
from fanout.views.region import (
    SORTED_FROM,
    BinnedPoints,
    Box,
    RegionUnion,
    Relative,
    Sector,
    Sphere,
    direction,
)

# Rounded to 9 places: distances that underflow (1e-175 squared is 0) are not geometry.
COORD = st.floats(-100, 100).map(lambda v: round(v, 9))
LENGTH = st.floats(0, 50, allow_nan=False, allow_infinity=False)
ANGLE = st.floats(-7, 7, allow_nan=False, allow_infinity=False)
HALF_ANGLE = st.floats(0.01, math.pi, allow_nan=False, allow_infinity=False)
DIMS = st.sampled_from([2, 3])

# Points closer than this to a boundary are skipped: there the vectorised and scalar formulas
# may round differently, and neither is more right.
EDGE = 1e-7


def shapes(dims: int) -> st.SearchStrategy[Box | Sphere | Sector]:
    return fs.primitives(dims, coords=COORD, sizes=LENGTH, headings=ANGLE, half_angles=HALF_ANGLE)


def points(dims: int, count: int = 200) -> st.SearchStrategy[np.ndarray]:
    return st.integers(0, 2**32 - 1).map(
        lambda seed: np.random.default_rng(seed).uniform(-160, 160, size=(dims, count))
    )


def scalar_in_sector(sector: Sector, point: tuple[float, ...]) -> bool | None:
    """The sector's membership of one point by its definition, None when too near an edge."""
    offset = [p - c for p, c in zip(point, sector.center, strict=True)]
    distance = math.hypot(*offset)
    if abs(distance - sector.radius) < EDGE:
        return None
    if distance > sector.radius:
        return False
    if distance < EDGE:
        return None
    axis = direction(sector.dims, sector.heading)
    cosine = sum(o * a for o, a in zip(offset, axis, strict=True)) / distance
    angle = math.acos(max(-1.0, min(1.0, cosine)))
    if abs(angle - sector.half_angle) < 1e-6:
        return None
    return angle <= sector.half_angle


def scalar_in(shape: Box | Sphere | Sector, point: tuple[float, ...]) -> bool | None:
    """Membership of one point by the shape's definition, None when too near a boundary."""
    if isinstance(shape, Box):
        gaps = [min(p - lo, hi - p) for p, lo, hi in zip(point, shape.lo, shape.hi, strict=True)]
        return None if any(abs(gap) < EDGE for gap in gaps) else min(gaps) > 0
    if isinstance(shape, Sphere):
        distance = math.dist(point, shape.center)
        return None if abs(distance - shape.radius) < EDGE else distance < shape.radius
    return scalar_in_sector(shape, point)


def test_lists_and_tuples_make_equal_views_with_equal_hashes() -> None:
    pairs = [
        (Box([0, 0], [10, 10]), Box((0.0, 0.0), (10.0, 10.0))),
        (Sphere([1, 2, 3], 4), Sphere((1.0, 2.0, 3.0), 4.0)),
        (Sector([0, 0, 0], 5, [0.5, 0.25], 1), Sector((0.0, 0.0, 0.0), 5.0, (0.5, 0.25), 1.0)),
        (
            RegionUnion([Box([0, 0], [1, 1]), Sphere([0, 0], 1)]),
            RegionUnion((Box((0, 0), (1, 1)), Sphere((0, 0), 1))),
        ),
    ]
    for listed, tupled in pairs:
        assert listed == tupled
        assert hash(listed) == hash(tupled)
    assert Box([0, 0], [10, 10]).lo == (0.0, 0.0)
    assert isinstance(Box(np.array([0, 0]), np.array([1, 1])).lo[0], float)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Box([0, math.nan], [1, 1]), ["lo[1]", "nan", "finite"]),
        (lambda: Box([0, 0], [1, math.inf]), ["hi[1]", "inf"]),
        (lambda: Box([5, 0], [1, 1]), ["lo[0] = 5.0", "hi[0] = 1.0"]),
        (lambda: Box([0, 0], [1, 1, 1]), ["lo has 2", "hi has 3"]),
        (lambda: Box([0], [1]), ["lo has 1 coordinates", "2-D or 3-D"]),
        (lambda: Box([0, 0, 0, 0], [1, 1, 1, 1]), ["4 coordinates"]),
        # tuples of floats, the form views are made in by the relay, are checked the same way
        (lambda: Box((0.0, math.nan), (1.0, 1.0)), ["lo[1]", "nan", "finite"]),
        (lambda: Box((0.0, 0.0), (math.inf, 1.0)), ["hi[0]", "inf"]),
        (lambda: Box((5.0, 0.0), (1.0, 1.0)), ["lo[0] = 5.0", "hi[0] = 1.0"]),
        (lambda: Box((0.0, 0.0), (1.0, 1.0, 1.0)), ["lo has 2", "hi has 3"]),
        (lambda: Box((0.0,) * 4, (1.0,) * 4), ["4 coordinates"]),
        (lambda: Box((0.0,), (1.0,)), ["1 coordinates"]),
        (lambda: Box(["a", 0], [1, 1]), ["lo[0]", "'a'", "not a number"]),
        (lambda: Box([True, 0], [1, 1]), ["lo[0]", "True"]),
        (lambda: Box("ab", [1, 1]), ["lo", "not a sequence"]),
        (lambda: Sphere([0, 0], -1), ["radius = -1.0", "negative"]),
        (lambda: Sphere([0, 0], math.nan), ["radius", "nan"]),
        (lambda: Sector([0, 0], 1, 0, 0), ["half_angle = 0.0", "(0, pi]"]),
        (lambda: Sector([0, 0], 1, 0, 3.5), ["half_angle = 3.5"]),
        (lambda: Sector([0, 0], 1, 0, -0.5), ["half_angle = -0.5"]),
        (lambda: Sector([0, 0], -2, 0, 0.5), ["radius = -2.0"]),
        (lambda: Sector([0, 0, 0], 1, 0.5, 0.5), ["heading = 0.5", "(azimuth, elevation)"]),
        (lambda: Sector([0, 0, 0], 1, (1, 2, 3), 0.5), ["heading has 3 angles"]),
        (lambda: Sector([0, 0], 1, (1, 2), 0.5), ["heading", "not a number"]),
        (lambda: RegionUnion([]), ["at least one"]),
        (lambda: RegionUnion([Box([0, 0], [1, 1]), Sphere([0, 0, 0], 1)]), ["member 1 is 3-D"]),
        (lambda: RegionUnion([Box([0, 0], [1, 1]), "box"]), ["member 1", "'box'"]),
        (lambda: Relative(True, Box([0, 0], [1, 1])), ["entity = True"]),
        (lambda: Relative("", Box([0, 0], [1, 1])), ["entity = ''"]),
        (lambda: Relative(1, "box:0,0,1,1"), ["view = 'box:0,0,1,1'"]),
    ],
)
def test_invalid_views_raise_invalid_view_naming_the_problem(make, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidView) as caught:
        make()
    assert isinstance(caught.value, ValueError)
    for word in words:
        assert word in str(caught.value)


def test_a_bad_view_from_the_wire_is_rejected_with_the_problem() -> None:
    wire = msgspec.msgpack.encode({"kind": "box", "lo": [5, 0], "hi": [1, 1]})
    with pytest.raises(msgspec.ValidationError, match=r"lo\[0\] = 5.0 is greater than hi\[0\]"):
        msgspec.msgpack.decode(wire, type=Box)
    wire = msgspec.msgpack.encode({"kind": "sphere", "center": [0, 0], "radius": -1})
    with pytest.raises(msgspec.ValidationError, match=r"radius = -1\.0 is negative"):
        msgspec.msgpack.decode(wire, type=Box | Sphere)


REGION_TYPE = Box | Sphere | Sector | RegionUnion | Relative
EXAMPLES = [
    Box([0, 0], [10, 10]),
    Box([0, 0, 0], [1, 2, 3]),
    Sphere([5, 5], 3),
    Sphere([1, 2, 3], 0),
    Sector([0, 0], 10, 0.5, 0.3),
    Sector([0, 0, 0], 10, (0.5, -0.2), math.pi),
    RegionUnion([Box([0, 0], [1, 1]), Sphere([3, 3], 1), Sector([0, 0], 2, 1, 1)]),
    Relative(42, Sphere([0, 0], 50)),
    Relative("ship-7", RegionUnion([Box([0, 0, 0], [1, 1, 1]), Sphere([0, 0, 0], 2)])),
]


@pytest.mark.parametrize("view", EXAMPLES, ids=str)
def test_msgpack_round_trip_through_the_tagged_union(view: REGION_TYPE) -> None:
    wire = msgspec.msgpack.encode(view)
    assert msgspec.msgpack.decode(wire, type=REGION_TYPE) == view
    assert msgspec.msgpack.decode(wire, type=type(view)) == view
    assert msgspec.json.decode(msgspec.json.encode(view), type=REGION_TYPE) == view


def test_the_wire_form_is_tagged_by_kind() -> None:
    assert msgspec.json.decode(msgspec.json.encode(Sphere([1, 2], 3))) == {
        "kind": "sphere",
        "center": [1.0, 2.0],
        "radius": 3.0,
    }


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_match_agrees_with_the_scalar_definition(data: st.DataObject) -> None:
    dims = data.draw(DIMS)
    shape = data.draw(shapes(dims))
    cloud = data.draw(points(dims))
    # Half the points near the shape, so both answers are exercised.
    bounds = shape.bounds()
    near = (
        np.random.default_rng(0)
        .uniform(np.array(bounds.lo) - 1, np.array(bounds.hi) + 1, size=(cloud.shape[1], dims))
        .T
    )
    cloud = np.concatenate([cloud, near], axis=1)
    mask = shape.match(*cloud)
    assert mask.dtype == np.bool_
    assert mask.shape == (cloud.shape[1],)
    for i in range(cloud.shape[1]):
        expected = scalar_in(shape, tuple(cloud[:, i]))
        if expected is not None:
            assert mask[i] == expected, (shape, cloud[:, i])


FINITE = st.floats(allow_nan=False, allow_infinity=False)
RADIUS = st.floats(0, allow_infinity=False) | st.sampled_from([1.35e154, 1e-160, 5e-324, 1.7e308])


def exact_in(shape: Sphere | Sector, point: tuple[float, ...]) -> bool | None:
    """Membership by the definition in exact rational arithmetic (no overflow, no underflow);
    None within a relative 1e-9 of the sphere or of the cone."""
    offset = [Fraction(p) - Fraction(c) for p, c in zip(point, shape.center, strict=True)]
    squared, reach = sum(o * o for o in offset), Fraction(shape.radius) ** 2
    if abs(squared - reach) <= reach / 10**9:
        return None
    if squared > reach or isinstance(shape, Sphere) or shape.half_angle >= math.pi:
        return squared < reach
    along = sum(o * Fraction(a) for o, a in zip(offset, shape.axis, strict=True))
    cosine = Fraction(math.cos(shape.half_angle))
    # along >= |offset| cos, squared on each side with the signs in mind
    gap = along * abs(along) - squared * cosine * abs(cosine)
    return None if abs(gap) <= squared / 10**9 else gap > 0


@st.composite
def round_shapes(draw: st.DrawFn, dims: int) -> Sphere | Sector:
    center, radius = [draw(FINITE) for _ in range(dims)], draw(RADIUS)
    if draw(st.booleans()):
        return Sphere(center, radius)
    heading = draw(ANGLE) if dims == 2 else (draw(ANGLE), draw(st.floats(-1.5, 1.5)))
    return Sector(center, radius, heading, draw(HALF_ANGLE))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_spheres_and_sectors_of_any_size_match_by_exact_distance(data: st.DataObject) -> None:
    """Squares of distances overflow past about 1.3e154 and underflow below 1.5e-154; a far
    point must still be outside a huge sphere, and a near one outside a tiny sphere."""
    dims = data.draw(DIMS)
    shape = data.draw(round_shapes(dims))
    factors = st.floats(-2.5, 2.5)
    cloud = [tuple(c + shape.radius * data.draw(factors) for c in shape.center) for _ in range(20)]
    cloud += [tuple(data.draw(FINITE) for _ in range(dims)) for _ in range(5)]
    cloud = [p for p in cloud if all(map(math.isfinite, p))]
    assume(cloud)
    mask = shape.match(*np.array(cloud).T)
    for point, matched in zip(cloud, mask.tolist(), strict=True):
        expected = exact_in(shape, point)
        if expected is not None:
            assert matched == expected, (shape, point)


def test_a_far_point_is_outside_a_huge_sphere_and_a_near_one_outside_a_tiny_one() -> None:
    assert Sphere([0, 0], 1e200).match([1e300, 5e199], [0, 5e199]).tolist() == [False, True]
    assert Sphere([0, 0], 1e-200).match([1e-170, 5e-201], [0, 0]).tolist() == [False, True]
    huge = Sector([0, 0], 1e200, 0.0, 0.5)
    assert huge.match([1e300, 5e199, -5e199], [0, 0, 0]).tolist() == [False, True, False]


def test_match_includes_the_boundary_and_the_apex() -> None:
    assert Box([0, 0], [1, 1]).match([0, 1, 1.5], [0, 1, 0]).tolist() == [True, True, False]
    assert Sphere([0, 0], 5).match([3, 3], [4, 4.01]).tolist() == [True, False]
    sector = Sector([1, 1], 2, math.pi / 2, 0.25)
    assert sector.match([1, 1, 1, 2], [1, 3, 3.01, 2]).tolist() == [True, True, False, False]


def test_a_full_sector_is_a_ball_and_a_3d_heading_points_by_azimuth_and_elevation() -> None:
    full = Sector([0, 0, 0], 1, (0, 0), math.pi)
    assert full.match([-1, 0, 0.5], [0, 0, 0.5], [0, -1, 0.5]).all()
    up = Sector([0, 0, 0], 10, (0, math.pi / 2), 0.1)
    assert up.match([0, 0, 1], [0, 0, 0], [5, -5, 5]).tolist() == [True, False, False]
    west = Sector([0, 0], 10, math.pi, 0.1)
    assert west.match([-5, 5], [0, 0]).tolist() == [True, False]


def test_a_2d_region_ignores_heights_and_a_3d_region_needs_them() -> None:
    assert Box([0, 0], [1, 1]).match([0.5], [0.5], [99]).tolist() == [True]
    with pytest.raises(InvalidView, match="3-D region needs zs"):
        Box([0, 0, 0], [1, 1, 1]).match([0.5], [0.5])


def test_match_accepts_scalars_lists_and_arrays_of_any_shape() -> None:
    sphere = Sphere([0, 0], 1)
    assert sphere.match(0.5, 0.5).shape == ()
    grid = np.zeros((3, 4))
    assert sphere.match(grid, grid).shape == (3, 4)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_bounds_hold_every_point_and_touch_the_shape(data: st.DataObject) -> None:
    dims = data.draw(DIMS)
    shape = data.draw(shapes(dims))
    bounds = shape.bounds()
    lo, hi = np.array(bounds.lo), np.array(bounds.hi)
    cloud = (
        np.random.default_rng(data.draw(st.integers(0, 99)))
        .uniform(lo - 2, hi + 2, size=(4000, dims))
        .T
    )
    inside = shape.match(*cloud)
    assert bounds.match(*cloud)[inside].all()
    if isinstance(shape, Box | Sphere):
        # Exact bounds: the extreme points of the shape lie on them.
        extreme = np.array(shape.center if isinstance(shape, Sphere) else shape.lo)
        assert bounds.lo[0] <= extreme[0] <= bounds.hi[0]


def test_sector_bounds_are_tight() -> None:
    quarter = Sector([0, 0], 10, math.pi / 4, math.pi / 4)
    assert quarter.bounds() == Box([0, 0], [10, 10])
    half = Sector([0, 0], 10, 0, math.pi / 2)
    assert half.bounds() == Box([0, -10], [10, 10])
    narrow = Sector([1, 2], 10, 0, 0.1)
    expected_y = 10 * math.sin(0.1)
    assert narrow.bounds().lo[0] == 1
    assert narrow.bounds().hi == pytest.approx((11, 2 + expected_y))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_grow_holds_every_point_within_the_margin(data: st.DataObject) -> None:
    dims = data.draw(DIMS)
    shape = data.draw(shapes(dims))
    # Margins far below the coordinates' precision would test rounding, not grow.
    margin = data.draw(st.just(0.0) | st.floats(0.01, 20))
    grown = shape.grow(margin)
    assert type(grown) is type(shape)
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    bounds = shape.bounds()
    cloud = rng.uniform(bounds.lo, bounds.hi, size=(3000, dims))
    cloud = cloud[shape.match(*cloud.T)]
    step = rng.normal(size=cloud.shape)
    step *= (rng.uniform(0, margin, size=(len(cloud), 1)) * 0.999) / np.maximum(
        np.linalg.norm(step, axis=1, keepdims=True), 1e-12
    )
    assert grown.match(*(cloud + step).T).all()


def test_grow_widens_each_shape_as_its_own_kind() -> None:
    assert Box([0, 0], [1, 1]).grow(2) == Box([-2, -2], [3, 3])
    assert Sphere([0, 0], 1).grow(2) == Sphere([0, 0], 3)
    assert Sector([0, 0], 1, 0, math.pi).grow(2) == Sector([0, 0], 3, 0, math.pi)
    grown = Sector([0, 0], 1, 0, math.pi / 6).grow(1)
    assert grown.center == pytest.approx((-2, 0))
    assert grown.radius == pytest.approx(4)
    # A hair under pi the apex would move back by 1e16 and the margin be lost in rounding: the
    # disc around the centre is the smaller answer.
    wide = Sector([0, 0], 0, 1.0, math.nextafter(math.pi, 0)).grow(5)
    assert wide == Sector([0, 0], 5, 1.0, math.pi)
    assert wide.match([3.0, -4.0], [4.0, -3.0]).all()
    with pytest.raises(InvalidView, match=r"margin = -1\.0 is negative"):
        Box([0, 0], [1, 1]).grow(-1)


def test_unions_flatten_match_any_member_and_bound_them_all() -> None:
    a, b, c = Box([0, 0], [1, 1]), Sphere([5, 5], 1), Sector([0, 0], 1, 0, 1)
    union = RegionUnion([a, RegionUnion([b, c])])
    assert union.members == (a, b, c)
    assert union.match([0.5, 5, 9], [0.5, 5.5, 9]).tolist() == [True, True, False]
    assert union.bounds() == Box([0, -math.sin(1)], [6, 6])
    assert union.grow(1) == RegionUnion([a.grow(1), b.grow(1), c.grow(1)])
    assert union.dims == 2


def test_relative_views_resolve_against_the_entity_position() -> None:
    relative = Relative(42, Sphere([0, 0], 50))
    assert relative.resolve([100, 200]) == Sphere([100, 200], 50)
    union = Relative("me", RegionUnion([Box([-1, -1], [1, 1]), Sector([0, 0], 5, 0, 1)]))
    assert union.resolve((10, 0)) == RegionUnion([Box([9, -1], [11, 1]), Sector([10, 0], 5, 0, 1)])
    assert relative.grow(5) == Relative(42, Sphere([0, 0], 55))
    with pytest.raises(InvalidView, match="position has 3 coordinates but the view is 2-D"):
        relative.resolve([1, 2, 3])
    with pytest.raises(InvalidView, match="resolve"):
        relative.match([0], [0])
    with pytest.raises(InvalidView, match="resolve"):
        relative.bounds()


def test_measure_gives_area_or_volume() -> None:
    assert Box([0, 0, 0], [1, 2, 3]).measure() == 6
    assert Sphere([0, 0], 2).measure() == pytest.approx(4 * math.pi)
    assert Sphere([0, 0, 0], 1).measure() == pytest.approx(4 / 3 * math.pi)
    assert Sector([0, 0], 2, 0, math.pi / 4).measure() == pytest.approx(math.pi)
    assert Sector([0, 0, 0], 1, (0, 0), math.pi).measure() == pytest.approx(4 / 3 * math.pi)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_sector_measure_matches_a_monte_carlo_estimate(data: st.DataObject) -> None:
    dims = data.draw(DIMS)
    sector = data.draw(
        fs.sectors(dims, coords=COORD, radii=LENGTH, headings=ANGLE, half_angles=HALF_ANGLE)
    )
    assume(sector.radius > 1)
    bounds = sector.bounds()
    box_measure = bounds.measure()
    assume(box_measure > 0)
    cloud = np.random.default_rng(1).uniform(bounds.lo, bounds.hi, size=(200_000, dims)).T
    estimate = sector.match(*cloud).mean() * box_measure
    assert estimate == pytest.approx(sector.measure(), rel=0.05, abs=box_measure * 0.01)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_union_of_many_matches_each_point_as_any_of_its_members_does(data: st.DataObject) -> None:
    """``RegionUnion.match`` over many members sorts the points and tests each member on the
    points within its bounds' x-range; the oracle tests every member on every point. Points on
    the members' bounds, at infinities and NaN included."""
    dims = data.draw(DIMS)
    members = data.draw(st.lists(shapes(dims), min_size=SORTED_FROM, max_size=3 * SORTED_FROM))
    union = RegionUnion(members)
    cloud = data.draw(points(dims, 300))
    edges = np.array([[m.bounds().lo[0], m.bounds().hi[0]] for m in members]).ravel()
    cloud[0, : len(edges)] = edges  # x on a bound
    cloud[0, -3:] = [np.nan, np.inf, -np.inf]
    coordinates = (*cloud, None) if dims == 2 else tuple(cloud)
    expected = np.zeros(cloud.shape[1], dtype=bool)
    for member in members:
        expected |= member.match(*coordinates)
    assert union.match(*coordinates).tolist() == expected.tolist()
    # The points sorted once, then asked of this union and of another (its later members).
    binned = BinnedPoints.of(*coordinates)
    assert binned is not None
    assert union.match_binned(binned).tolist() == expected.tolist()
    others = members[len(members) // 2 :]
    expected = np.zeros(cloud.shape[1], dtype=bool)
    for member in others:
        expected |= member.match(*coordinates)
    assert RegionUnion(others).match_binned(binned).tolist() == expected.tolist()
