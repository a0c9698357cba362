"""Matching collected rows in the driver (``matching.local``) agrees with a brute force over
every (row, primitive) pair and with Spark's broadcast join (``matching.regions``)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fanout.publisher.matching.local import local_tables, match_local
from fanout.publisher.matching.regions import ShapeFrames, match, shapes_of
from fanout.views import Box, RegionUnion, Sector, Sphere
from fanout.views.entity import Entity

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
prims = st.dictionaries(
    st.tuples(st.integers(1, 3), st.integers(1, 6)),
    st.one_of(regions, st.integers(0, 60).map(Entity)),
    min_size=1,
    max_size=6,
)
ODD = [math.nan, math.inf, -math.inf, 1e308, -1e308]


def rows_of(count: int, seed: int, odd: int) -> pa.Table:
    """``count`` points around ``[0, 100]^2``, the first ``odd`` with NaN, infinite or huge
    coordinates."""
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-10, 110, count), rng.uniform(-10, 110, count)
    for index in range(min(odd, count)):
        x[index] = ODD[index % len(ODD)]
        y[count - 1 - index] = ODD[(index + 2) % len(ODD)]
    return pa.table({"id": np.arange(count, dtype=np.int64), "x": x, "y": y})


def brute_force(rows: pa.Table, views: dict[tuple[int, int], object]) -> set[tuple[int, int]]:
    """Every (relay, key) pair, one row and one primitive at a time, in plain Python."""
    pairs = set()
    for key, x, y in zip(*(rows.column(c).to_pylist() for c in ("id", "x", "y")), strict=True):
        for (relay, _), view in views.items():
            if isinstance(view, Entity):
                inside = view.key == key
            else:
                inside = bool(view.match(np.array([x]), np.array([y]))[0])  # type: ignore[attr-defined]
            if inside:
                pairs.add((relay, key))
    return pairs


def local_pairs(rows: pa.Table, views: dict[tuple[int, int], object]) -> set[tuple[int, int]]:
    tables = local_tables([(relay, prim, view) for (relay, prim), view in views.items()])
    assert tables is not None
    keys = rows.column("id").to_numpy()
    found = match_local(rows, tables, ("x", "y"), "id")
    for indices in found.values():
        assert np.all(np.diff(indices) > 0), "sorted and distinct"
    return {(relay, int(key)) for relay, indices in found.items() for key in keys[indices]}


@settings(max_examples=150, deadline=None)
@given(
    views=prims,
    seed=st.integers(0, 1000),
    odd=st.integers(0, 6),
    scale=st.sampled_from([1.0, 2.0**-600, 2.0**600]),
)
def test_the_driver_matches_like_a_brute_force(scaled, *, views, seed, odd, scale) -> None:
    """Also with every length times a power of two (exact, so no answer changes) and rows at
    NaN, infinite and huge coordinates."""
    rows = rows_of(60, seed, odd)
    expected = brute_force(rows, views)
    with np.errstate(over="ignore"):  # a huge coordinate times 2**600 is infinite: still out
        for index, axis in ((1, "x"), (2, "y")):
            rows = rows.set_column(index, axis, pa.array(rows.column(axis).to_numpy() * scale))
    views = {
        at: view if isinstance(view, Entity) else scaled(view, scale) for at, view in views.items()
    }
    assert local_pairs(rows, views) == brute_force(rows, views) == expected


def test_a_point_on_a_bounding_box_edge_is_matched() -> None:
    rows = pa.table({"id": [1, 2, 3], "x": [10.0, 20.0, 20.000001], "y": [10.0, 20.0, 20.0]})
    views = {(1, 1): Box((10, 10), (20, 20)), (2, 1): Sphere((15, 20), 5)}
    assert local_pairs(rows, views) == {(1, 1), (1, 2), (2, 2)}


def test_no_primitives_no_tables_and_no_rows_no_matches() -> None:
    assert local_tables([]) is None
    tables = local_tables([(1, 1, Box((0, 0), (1, 1)))])
    assert tables is not None
    empty = pa.table({"id": pa.array([], pa.int64()), "x": [], "y": []})
    assert match_local(empty, tables, ("x", "y"), "id") == {}


@pytest.mark.spark
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(views=prims, seed=st.integers(0, 1000))
def test_the_driver_matches_like_sparks_join(spark, *, views, seed) -> None:
    rows = rows_of(300, seed, 4)
    shapes = [
        shape
        for (relay, prim), view in views.items()
        if not isinstance(view, Entity)
        for shape in shapes_of(relay, prim, view)
    ]
    entities = [
        (relay, prim, view.key) for (relay, prim), view in views.items() if isinstance(view, Entity)
    ]
    frames = ShapeFrames.build(spark, shapes, 2, 12.5, entities=entities, key="id")
    joined = match(spark.createDataFrame(rows), frames, ("x", "y"), 12.5).toArrow()
    in_spark = set(
        zip(joined.column("_relay").to_pylist(), joined.column("id").to_pylist(), strict=True)
    )
    assert local_pairs(rows, views) == in_spark
