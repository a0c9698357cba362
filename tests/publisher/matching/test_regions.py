"""Region matching in Spark agrees with the views' own numpy ``match`` (the oracle)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.publisher.matching.regions import (
    MAX_CELLS,
    RegionMatcher,
    ShapeFrames,
    match,
    shape_table,
    shapes_of,
)
from fanout.views import Box, RegionUnion, Sector, Sphere
from fanout.views.entity import Entity

pytestmark = pytest.mark.spark

coordinate = st.floats(0, 100, allow_nan=False)
boxes = st.builds(
    lambda x, y, w, h: Box((x, y), (x + w, y + h)),
    coordinate,
    coordinate,
    st.floats(0, 40),
    st.floats(0, 40),
)
spheres = st.builds(lambda x, y, r: Sphere((x, y), r), coordinate, coordinate, st.floats(0, 30))
sectors = st.builds(
    lambda x, y, r, h, a: Sector((x, y), r, h, a),
    coordinate,
    coordinate,
    st.floats(1, 40),
    st.floats(-math.pi, math.pi),
    st.floats(0.05, math.pi),
)
primitives = st.one_of(boxes, spheres, sectors)
regions = st.one_of(primitives, st.lists(primitives, min_size=2, max_size=3).map(RegionUnion))


def points(count: int, dims: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = {"id": np.arange(count, dtype=np.int64)}
    for axis in "xyz"[:dims]:
        table[axis] = rng.uniform(-10, 110, count)
    return table


def spark_pairs(
    spark,
    rows: dict[str, np.ndarray],
    views: dict[tuple[int, int], object],
    cell: float,
    keep: bool = False,
) -> set[tuple[int | None, int]]:
    dims = len(rows) - 1
    shapes = [s for (relay, prim), view in views.items() for s in shapes_of(relay, prim, view)]
    frames = ShapeFrames.build(spark, shapes, dims, cell)
    try:
        frame = spark.createDataFrame(pa.table(rows))
        result = match(frame, frames, "xyz"[:dims], cell, keep_unmatched=keep).toArrow()
    finally:
        frames.unpersist()
    return set(
        zip(result.column("_relay").to_pylist(), result.column("id").to_pylist(), strict=True)
    )


def oracle(
    rows: dict[str, np.ndarray], views: dict[tuple[int, int], object]
) -> set[tuple[int, int]]:
    coords = [rows[a] for a in "xyz" if a in rows]
    return {
        (relay, int(key))
        for (relay, _), view in views.items()
        for key in rows["id"][view.match(*coords)]  # type: ignore[attr-defined]
    }


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    views=st.dictionaries(
        st.tuples(st.integers(1, 3), st.integers(1, 4)), regions, min_size=1, max_size=5
    ),
    cell=st.sampled_from([5.0, 12.5, 50.0]),
    seed=st.integers(0, 1000),
    scale=st.sampled_from([1.0, 2.0**-600, 2.0**600]),
)
def test_spark_matches_every_relay_exactly_like_numpy(
    spark, scaled, *, views, cell, seed, scale
) -> None:
    """Also with every length times a power of two (exact), which changes no answer: squares of
    distances beyond the floats' range on either side are compared scaled."""
    rows = points(400, 2, seed)
    expected = oracle(rows, views)
    rows = {name: values if name == "id" else values * scale for name, values in rows.items()}
    views = {at: scaled(view, scale) for at, view in views.items()}
    assert oracle(rows, views) == expected
    assert spark_pairs(spark, rows, views, cell * scale) == expected


def test_three_d_spheres_and_cones(spark) -> None:
    rows = points(2000, 3, 7)
    views = {
        (1, 1): Sphere((50, 50, 50), 25),
        (2, 1): Sector((20, 20, 20), 60, (0.7, 0.3), 0.4),
        (2, 2): Box((0, 0, 0), (10, 100, 30)),
    }
    assert spark_pairs(spark, rows, views, 10.0) == oracle(rows, views)


def test_a_huge_region_is_matched_without_exploding_cells(spark) -> None:
    huge = Box((-1e9, -1e9), (1e9, 1e9))
    bucketed, wide = shape_table(shapes_of(1, 1, huge), 2, 1.0)
    assert bucketed.num_rows == 0
    assert wide.num_rows == 1
    rows = points(300, 2, 3)
    views = {(1, 1): huge, (2, 1): Box((0, 0), (50, 50))}
    assert spark_pairs(spark, rows, views, 1.0) == oracle(rows, views)


def test_a_region_as_large_as_floats_go_is_wide() -> None:
    huge = Box((-1e308, -1e308), (1e308, 1e308))  # more cells than a C integer counts
    bucketed, wide = shape_table(shapes_of(1, 1, huge), 2, 0.5)
    assert (bucketed.num_rows, wide.num_rows) == (0, 1)


def test_rows_with_huge_infinite_or_nan_coordinates_are_matched_not_fatal(spark) -> None:
    # floor(1e300 / 0.5) does not fit a 64-bit integer: under ANSI SQL it failed the batch
    rows = points(50, 2, 5)
    rows["x"][:4] = [1e300, -math.inf, math.nan, 1.7e308]
    rows["y"][:4] = [1e300, 5.0, 5.0, 1.7e308]
    views = {
        (1, 1): Box((0, 0), (50, 50)),
        (2, 1): Box((-1e308, -1e308), (1e308, 1e308)),
        (3, 1): Box((1e299, 1e299), (1e301, 1e301)),
        (4, 1): Box((1.7e308, 1.7e308), (1.7e308, 1.7e308)),  # in the clamped extreme cell
    }
    pairs = spark_pairs(spark, rows, views, 0.5)
    assert pairs == oracle(rows, views)
    assert {(3, 0), (4, 3)} <= pairs  # found by the views around them


def test_huge_and_tiny_spheres_and_sectors_match_by_their_true_distances(spark) -> None:
    # Unscaled, squared distances past 1.3e154 were infinite (a point at 1e300 was inside a
    # sphere of radius 1e200) and below 1.5e-154 were 0 (a point at 1e-170 was inside a sphere
    # of radius 1e-200).
    rows = {
        "id": np.arange(8, dtype=np.int64),
        "x": np.array([1e300, 5e199, -5e199, 1e-170, 5e-201, 0.0, math.inf, 1e180]),
        "y": np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e179]),
    }
    views = {
        (1, 1): Sphere((0, 0), 1e200),
        (2, 1): Sector((0, 0), 1e200, 0.0, 0.5),
        (3, 1): Sphere((0, 0), 1e-200),
        (4, 1): Sector((0, 0), 1e-200, 0.0, 0.5),
    }
    expected = {1: {1, 2, 3, 4, 5, 7}, 2: {1, 3, 4, 5, 7}, 3: {4, 5}, 4: {4, 5}}
    pairs = spark_pairs(spark, rows, views, 1.0)
    assert pairs == {(relay, key) for relay, keys in expected.items() for key in keys}
    assert pairs == oracle(rows, views)


def test_keep_unmatched_returns_every_row_once_more_with_its_matches(spark) -> None:
    rows = points(200, 2, 11)
    views = {(1, 1): Box((0, 0), (50, 50))}
    pairs = spark_pairs(spark, rows, views, 10.0, keep=True)
    matched = oracle(rows, views)
    assert {p for p in pairs if p[0] is not None} == matched
    unmatched = {key for relay, key in pairs if relay is None}
    assert unmatched == set(range(200)) - {key for _, key in matched}


def test_max_cells_bounds_the_cell_table() -> None:
    side = math.isqrt(MAX_CELLS)
    just_fits = Box((0, 0), (side - 0.5, side - 0.5))
    bucketed, wide = shape_table(shapes_of(1, 1, just_fits), 2, 1.0)
    assert (bucketed.num_rows, wide.num_rows) == (side * side, 0)


def test_entity_primitives_match_their_key_wherever_it_is(spark) -> None:
    matcher = RegionMatcher(("x", "y"), 10.0, key="id")
    rows = points(300, 2, 5)
    prims = [(1, 1, Box((0, 0), (20, 20))), (1, 2, Entity(7)), (2, 1, Entity(250))]
    tables = matcher.tables(spark, prims)
    try:
        frame = spark.createDataFrame(pa.table(rows))
        result = matcher.match(frame, tables, keep_unmatched=True).toArrow()
    finally:
        tables.unpersist()
    found = set(
        zip(
            result.column("_relay").to_pylist(),
            result.column("_prim").to_pylist(),
            result.column("id").to_pylist(),
            strict=True,
        )
    )
    in_box = set(rows["id"][Box((0, 0), (20, 20)).match(rows["x"], rows["y"])].tolist())
    assert {key for relay, prim, key in found if (relay, prim) == (1, 1)} == in_box
    assert {key for relay, prim, key in found if (relay, prim) == (1, 2)} == {7}
    assert {key for relay, prim, key in found if (relay, prim) == (2, 1)} == {250}
    unmatched = {key for relay, _, key in found if relay is None}
    assert unmatched == set(range(300)) - in_box  # every row once more, as without entities


def test_entity_primitives_are_checked_against_the_key_type() -> None:
    assert RegionMatcher(("x", "y"), 10.0, key="id").check(Entity(3)) == Entity(3)
    with pytest.raises(InvalidView, match="integer"):
        RegionMatcher(("x", "y"), 10.0, key="id").check(Entity("a"))
    with pytest.raises(InvalidView, match="region"):
        RegionMatcher(("x", "y"), 10.0).check(Entity(3))  # no key column given: not taken


def test_the_shape_tables_are_broadcast_from_the_driver_not_scanned_from_a_cache(spark) -> None:
    """Every micro-batch plans its match afresh: a cached shape table would cost a Spark job to
    scan it each time, a local relation is folded and broadcast by the driver."""
    shapes = shapes_of(1, 1, Box((0, 0), (50, 50))) + shapes_of(1, 2, Sphere((20, 20), 5))
    frames = ShapeFrames.build(spark, shapes, 2, 10.0)
    assert not frames.bucketed.is_cached and not frames.wide.is_cached
    rows = spark.createDataFrame(pa.table(points(10, 2, 3)))
    plan = match(rows, frames, "xy", 10.0)._jdf.queryExecution().optimizedPlan().toString()
    assert "LocalRelation" in plan and "InMemoryRelation" not in plan
