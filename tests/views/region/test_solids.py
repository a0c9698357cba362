"""The one-sided cell tests under the coverage algebra, against sampled points.

``meets_cell`` may only err towards True and ``contains_cell`` towards False; a constraint may
only be said to imply another when it does.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.testing import strategies as fs
from fanout.views.region import Box, Sector, Sphere, cells
from fanout.views.region.solids import _max_cosine, active_constraints, solid_of

# Rounded to 9 places: distances that underflow (1e-175 squared is 0) are not geometry.
COORD = st.integers(-10, 10).map(float) | st.floats(-10, 10).map(lambda v: round(v, 9))
SIZE = st.integers(0, 8).map(float) | st.floats(0, 8).map(lambda v: round(v, 9))
HALF = st.sampled_from([0.3, math.pi / 2, 2.0, math.pi]) | st.floats(0.05, math.pi)


def shapes(dims: int) -> st.SearchStrategy[Box | Sphere | Sector]:
    """Boxes, spheres and sectors (twice as likely), curved ones never a point."""
    radii = SIZE.map(lambda r: r + 1)
    sectors = fs.sectors(
        dims, coords=COORD, radii=radii, headings=st.floats(-4, 4), half_angles=HALF
    )
    return st.one_of(
        fs.boxes(dims, coords=COORD, sizes=SIZE),
        fs.spheres(dims, coords=COORD, radii=radii),
        sectors,
        sectors,
    )


@st.composite
def cell_boxes(draw: st.DrawFn, dims: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    lo = tuple(draw(COORD) for _ in range(dims))
    return lo, tuple(v + draw(SIZE) for v in lo)


def cell_points(lo: tuple[float, ...], hi: tuple[float, ...], seed: int) -> np.ndarray:
    """Random points of a cell, plus its corners."""
    rng = np.random.default_rng(seed)
    inner = rng.uniform(lo, hi, size=(3000, len(lo)))
    corners = np.array(list(itertools.product(*zip(lo, hi, strict=True))))
    return np.concatenate([inner, corners]).T


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_cell_tests_err_only_on_the_safe_side(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([2, 3]))
    shape = data.draw(shapes(dims))
    lo, hi = data.draw(cell_boxes(dims))
    solid = solid_of(shape)
    inside = shape.match(*cell_points(lo, hi, data.draw(st.integers(0, 99))))
    # A box that only touches a cell's face does not "meet" it on purpose (cells.meets); the
    # exact box tests in test_algebra cover that rule.
    if not solid.meets_cell(lo, hi) and not isinstance(shape, Box):
        assert not inside.any()
    if solid.contains_cell(lo, hi):
        assert inside.all()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_cell_tests_and_match_do_not_depend_on_the_scale(scaled, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    """Scaling a shape, a cell and points by a power of two changes no answer, from 1e-271 to
    1e271: squared distances of huge shapes overflow and those of tiny ones underflow unless
    they are computed scaled (``distance_scale``)."""
    dims = data.draw(st.sampled_from([2, 3]))
    shape = data.draw(shapes(dims))
    lo, hi = data.draw(cell_boxes(dims))
    factor = math.ldexp(1.0, data.draw(st.integers(-900, 900)))
    big, small = solid_of(scaled(shape, factor)), solid_of(shape)
    big_cell = ([v * factor for v in lo], [v * factor for v in hi])
    assert big.meets_cell(*big_cell) == small.meets_cell(lo, hi)
    assert big.contains_cell(*big_cell) == small.contains_cell(lo, hi)
    cloud = cell_points(lo, hi, data.draw(st.integers(0, 99)))
    assert scaled(shape, factor).match(*(cloud * factor)).tolist() == shape.match(*cloud).tolist()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_max_cosine_bounds_every_direction_into_the_cell(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([2, 3]))
    apex = tuple(data.draw(COORD) for _ in range(dims))
    axis = np.random.default_rng(data.draw(st.integers(0, 99))).normal(size=dims)
    axis = tuple(axis / np.linalg.norm(axis))
    lo, hi = data.draw(cell_boxes(dims))
    bound = _max_cosine(axis, apex, lo, hi)
    offsets = cell_points(lo, hi, 1).T - np.array(apex)
    lengths = np.linalg.norm(offsets, axis=1)
    cosines = (offsets @ np.array(axis))[lengths > 0] / lengths[lengths > 0]
    assert (cosines <= bound + 1e-9).all()
    # ...and is attained, on the cell's surface: dense sampling there gets close to it.
    holds_apex = all(low <= a <= high for low, a, high in zip(lo, apex, hi, strict=True))
    if not holds_apex:
        surface = np.concatenate([face_points(lo, hi), near_points(apex, lo, hi)])
        surface -= np.array(apex)
        lengths = np.linalg.norm(surface, axis=1)
        assert ((surface @ np.array(axis)) / lengths).max() >= bound - 0.02


def near_points(
    apex: tuple[float, ...], lo: tuple[float, ...], hi: tuple[float, ...]
) -> np.ndarray:
    """Points of a cell around its point nearest ``apex``, at distances from 1e-12 up.

    An apex a hair's breadth from a cell (1e-9, say) sees the cell's part near it under wide
    angles that only points as close as that show: face and edge samples miss them.
    """
    rng = np.random.default_rng(3)
    nearest = np.clip(apex, lo, hi)
    directions = rng.normal(size=(300, 40, len(lo)))
    directions /= np.linalg.norm(directions, axis=2, keepdims=True)
    radii = np.geomspace(1e-12, 20.0, 300)[:, None, None]
    return np.clip(nearest + radii * directions, lo, hi).reshape(-1, len(lo))


def face_points(lo: tuple[float, ...], hi: tuple[float, ...]) -> np.ndarray:
    """Random points on each face of a cell, plus dense points along every edge.

    The largest cosine is often attained on an edge (in 3-D, inside it), where random face
    samples land too sparsely to get within the tolerance.
    """
    rng = np.random.default_rng(2)
    faces = []
    for axis, end in itertools.product(range(len(lo)), (lo, hi)):
        points = rng.uniform(lo, hi, size=(4000, len(lo)))
        points[:, axis] = end[axis]
        faces.append(points)
    steps = np.linspace(0.0, 1.0, 2001)
    for axis in range(len(lo)):
        others = [a for a in range(len(lo)) if a != axis]
        for ends in itertools.product((0, 1), repeat=len(others)):
            edge = np.empty((len(steps), len(lo)))
            edge[:, axis] = lo[axis] + steps * (hi[axis] - lo[axis])
            for other, end in zip(others, ends, strict=True):
                edge[:, other] = (lo, hi)[end][other]
            faces.append(edge)
    return np.concatenate(faces)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_held_solid_covers_only_what_it_holds_of_the_view(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([2, 3]))
    view, have = data.draw(shapes(dims)), data.draw(shapes(dims))
    if data.draw(st.booleans()) and not isinstance(view, Box):
        have = view.grow(data.draw(st.sampled_from([0.0, 0.5])))
    active = active_constraints(solid_of(have), solid_of(view))
    lo, hi = data.draw(cell_boxes(dims))
    if all(constraint.contains_cell(lo, hi) for constraint in active):
        cloud = cell_points(lo, hi, data.draw(st.integers(0, 99)))
        in_view = view.match(*cloud)
        assert have.match(*cloud)[in_view].all()


def test_a_sector_held_with_the_views_own_arc_covers_the_cells_the_arc_cuts() -> None:
    view = Sector([0, 0], 10, 0, 0.6)
    half = solid_of(Sector([0, 0], 10, 0.35, 0.25))
    active = active_constraints(half, solid_of(view))
    # Only the inner edge (the seam) is left to check: the arc and outer edge are the view's.
    assert len(active) == 1
    arc_cell = ((9.0, 3.0), (10.0, 4.0))
    assert all(constraint.contains_cell(*arc_cell) for constraint in active)
    assert not half.contains_cell(*arc_cell)


def test_merge_and_subtract_keep_the_union() -> None:
    pieces = cells.subtract((0.0, 0.0), (10.0, 10.0), (2.0, 2.0), (5.0, 5.0))
    assert len(pieces) == 4
    assert sum(cells.volume(lo, hi) for lo, hi in pieces) == 100 - 9
    halves = cells.halve((0.0, 0.0), (4.0, 2.0))
    assert halves == (((0.0, 0.0), (2.0, 2.0)), ((2.0, 0.0), (4.0, 2.0)))
    assert cells.merge(list(halves)) == [((0.0, 0.0), (4.0, 2.0))]
    grid = [((x, y), (x + 1.0, y + 1.0)) for x in range(3) for y in range(2)]
    assert cells.merge([(tuple(map(float, lo)), tuple(map(float, hi))) for lo, hi in grid]) == [
        ((0.0, 0.0), (3.0, 2.0))
    ]


def test_max_cosine_is_attained_next_to_a_cell_a_hair_away() -> None:
    # Found by Hypothesis: a segment 1e-9 from the apex, whose widest angle is 4e-10 along it.
    axis = (0.36353657, 0.86429949, 0.34760259)
    norm = math.sqrt(sum(a * a for a in axis))
    axis = tuple(a / norm for a in axis)
    apex, lo, hi = (0.0, 0.0, 0.0), (0.0, 1e-9, 0.0), (0.0, 1e-9, 1.0)
    bound = _max_cosine(axis, apex, lo, hi)
    surface = near_points(apex, lo, hi) - np.array(apex)
    assert ((surface @ np.array(axis)) / np.linalg.norm(surface, axis=1)).max() >= bound - 0.02
