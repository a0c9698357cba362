"""The grid index finds exactly what a full scan finds (a brute-force oracle)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data.spatial import GridIndex
from fanout.testing import strategies as fs
from fanout.views import Box, Sphere
from fanout.views.region import RegionUnion, Sector

COORD = st.floats(-100, 100, allow_nan=False, allow_infinity=False)
LENGTH = st.floats(0, 60, allow_nan=False, allow_infinity=False)


def regions(dims: int) -> st.SearchStrategy[Box | Sphere | Sector | RegionUnion]:
    shapes = fs.primitives(
        dims,
        coords=COORD,
        sizes=LENGTH,
        headings=st.floats(-7, 7),
        elevations=st.just(0.3),
        half_angles=st.floats(0.01, math.pi),
    )
    return fs.regions(dims, shapes, max_members=3)


@st.composite
def clouds(draw: st.DrawFn, dims: int) -> list[np.ndarray]:
    """Points: uniform, clustered, all equal, or with NaN/inf mixed in."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(0, 400))
    layout = draw(st.sampled_from(["uniform", "cluster", "flat", "degenerate"]))
    if layout == "uniform":
        columns = [rng.uniform(-120, 120, count) for _ in range(dims)]
    elif layout == "cluster":
        columns = [rng.normal(draw(COORD), 3.0, count) for _ in range(dims)]
    elif layout == "flat":
        columns = [rng.uniform(-120, 120, count) for _ in range(dims - 1)]
        columns.append(np.full(count, draw(COORD)))
    else:
        columns = [rng.uniform(-120, 120, count) for _ in range(dims)]
        for column in columns:
            spoiled = rng.random(count) < 0.1
            column[spoiled] = rng.choice([np.nan, np.inf, -np.inf], int(spoiled.sum()))
    return columns


@settings(max_examples=300)
@given(st.data())
def test_query_equals_a_full_scan(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([2, 3]))
    columns = data.draw(clouds(dims))
    index = GridIndex(columns, per_cell=data.draw(st.integers(1, 32)))
    for _ in range(5):
        region = data.draw(regions(dims))
        with np.errstate(invalid="ignore"):  # the oracle meets NaN and inf head on
            expected = np.flatnonzero(region.match(*columns))
        assert index.query(region).tolist() == expected.tolist()


BOX_COORD = st.floats(-150, 150, allow_nan=False, allow_infinity=False)


def boxes(dims: int) -> st.SearchStrategy[Box]:
    return fs.boxes(dims, coords=BOX_COORD, sizes=st.sampled_from([0.0, 1.0, 30.0, 400.0]))


def assert_both_queries_scan(index: GridIndex, columns: list[np.ndarray], asked: list[Box]) -> None:
    """``query_many`` of the boxes and ``query`` of each find what a full scan finds."""
    positions, bounds = index.query_many(asked)
    for number, box in enumerate(asked):
        with np.errstate(invalid="ignore"):
            expected = np.flatnonzero(box.match(*columns))
        assert positions[bounds[number] : bounds[number + 1]].tolist() == expected.tolist()
        assert index.query(box).tolist() == expected.tolist()


@settings(max_examples=300)
@given(st.data())
def test_query_many_equals_a_full_scan_of_each_box(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([2, 3]))
    columns = data.draw(clouds(dims))
    index = GridIndex(columns, per_cell=data.draw(st.integers(1, 32)))
    asked = data.draw(st.lists(boxes(dims), max_size=12))
    positions, bounds = index.query_many(asked)
    assert len(bounds) == len(asked) + 1
    for number, box in enumerate(asked):
        with np.errstate(invalid="ignore"):
            expected = np.flatnonzero(box.match(*columns))
        assert positions[bounds[number] : bounds[number + 1]].tolist() == expected.tolist()


@settings(max_examples=200)
@given(st.data())
def test_query_many_keeps_the_points_on_a_box_s_faces(data: st.DataObject) -> None:
    """Boxes spanned by two of the points, so that points lie exactly on their faces."""
    dims = data.draw(st.sampled_from([2, 3]))
    columns = data.draw(clouds(dims))
    finite = np.flatnonzero(np.all([np.isfinite(column) for column in columns], axis=0))
    if not len(finite):
        return
    index = GridIndex(columns, per_cell=data.draw(st.integers(1, 32)))
    asked = []
    for _ in range(data.draw(st.integers(1, 8))):
        one, other = (data.draw(st.sampled_from(finite.tolist())) for _ in range(2))
        corners = [(float(c[one]), float(c[other])) for c in columns]
        asked.append(Box(tuple(map(min, corners)), tuple(map(max, corners))))
    assert_both_queries_scan(index, columns, asked)


def test_a_small_view_looks_at_few_rows() -> None:
    rng = np.random.default_rng(0)
    columns = [rng.uniform(0, 4000, 100_000), rng.uniform(0, 4000, 100_000)]
    index = GridIndex(columns)
    view = Box((1000, 1000), (1125, 1125))
    candidates = index._candidates(view)
    assert len(candidates) < 2_000  # of 100,000 rows: only the cells under the view
    assert index.query(view).tolist() == np.flatnonzero(view.match(*columns)).tolist()


def test_points_on_the_far_edge_are_found() -> None:
    xs, ys = np.array([0.0, 10.0, 10.0]), np.array([0.0, 10.0, 5.0])
    index = GridIndex([xs, ys], per_cell=1)
    assert index.query(Box((10, 10), (10, 10))).tolist() == [1]
    assert index.query(Box((10, 0), (20, 20))).tolist() == [1, 2]
    assert index.query(Box((11, 0), (20, 20))).tolist() == []


ANY_FINITE = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=200)
@given(st.data())
def test_points_and_boxes_anywhere_in_floating_point(data: st.DataObject) -> None:
    """Points and boxes from the whole range of floats (where the spans of the data, the cells
    and the query pads overflow) and non-finite points: still exactly a full scan."""
    dims = data.draw(st.sampled_from([2, 3]))
    count = data.draw(st.integers(1, 60))
    point = st.one_of(ANY_FINITE, st.sampled_from([math.nan, math.inf, -math.inf, 1.7e308]))
    columns = [
        np.array(data.draw(st.lists(point, min_size=count, max_size=count))) for _ in range(dims)
    ]
    index = GridIndex(columns, per_cell=data.draw(st.integers(1, 8)))
    asked = []
    for _ in range(data.draw(st.integers(1, 6))):
        corners = [
            sorted(data.draw(st.lists(ANY_FINITE, min_size=2, max_size=2))) for _ in range(dims)
        ]
        asked.append(Box(tuple(c[0] for c in corners), tuple(c[1] for c in corners)))
    assert_both_queries_scan(index, columns, asked)


def test_a_box_on_the_top_edge_of_the_data_finds_the_rows_there() -> None:
    # (0 - 1e-9 + 7145192) / (7145192 / 3) rounds to 3.0 = cells: the first cell the box
    # touches was computed past the last one, and its rows were missed
    columns = [np.zeros(5), np.array([0.0, 0.0, 0.0, 0.0, -7145192.0])]
    index = GridIndex(columns, per_cell=1)
    box = Box((0.0, 0.0), (0.0, 0.0))
    assert index.query(box).tolist() == [0, 1, 2, 3]
    positions, bounds = index.query_many([box])
    assert positions.tolist() == [0, 1, 2, 3]
    assert bounds.tolist() == [0, 4]
