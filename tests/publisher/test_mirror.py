"""The driver's mirror of a dataset, against brute-force oracles (DuckDB for SQL primitives),
against Spark's own snapshots from the state store, and against the Spark matchers."""

from __future__ import annotations

import datetime
import math
import time

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher import streams
from fanout.publisher.datasets import agents
from fanout.publisher.delivery import rows_by_relay
from fanout.publisher.matching import matcher_for
from fanout.publisher.matching.paths import PathMatcher
from fanout.publisher.matching.sql import SqlMatcher
from fanout.publisher.matching.topics import TopicMatcher
from fanout.publisher.mirror import Mirror
from fanout.publisher.sources.simulation import SimulationParams
from fanout.publisher.state import current_state, latest_per_key
from fanout.views import Box
from fanout.views.entity import Entity
from fanout.views.objects import ObjectPath
from fanout.views.region import RegionUnion, Sector, Sphere
from fanout.views.sql import Sql, SqlBox
from fanout.views.topic import TopicFilter

KEYS = 12
# Coordinates on a coarse grid, so rows land on the primitives' boundaries often.
coordinate = st.integers(0, 20).map(float)
change = st.tuples(st.integers(0, KEYS - 1), coordinate, coordinate, st.booleans())
changes = st.lists(change, max_size=15)


def table(rows: list[tuple[int, float, float, bool]], version: int) -> pa.Table:
    """One micro-batch's changed rows: one per key (the last one given wins, as Spark's would)."""
    latest = {key: (x, y, deleted) for key, x, y, deleted in rows}
    keys = sorted(latest)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "x": pa.array([latest[k][0] for k in keys], pa.float64()),
            "y": pa.array([latest[k][1] for k in keys], pa.float64()),
            "_version": pa.array([version] * len(keys), pa.int64()),
            "_deleted": pa.array([latest[k][2] for k in keys], pa.bool_()),
        }
    )


def region() -> st.SearchStrategy[object]:
    box = st.tuples(coordinate, coordinate, st.integers(0, 12), st.integers(0, 12)).map(
        lambda b: Box((b[0], b[1]), (b[0] + b[2], b[1] + b[3]))
    )
    sphere = st.tuples(coordinate, coordinate, st.integers(0, 8)).map(
        lambda s: Sphere((s[0], s[1]), float(s[2]))
    )
    sector = st.tuples(coordinate, coordinate, st.integers(1, 10), st.integers(0, 7)).map(
        lambda s: Sector((s[0], s[1]), float(s[2]), s[3] * math.pi / 4, 0.6)
    )
    entity = st.integers(0, KEYS + 2).map(Entity)
    single = st.one_of(box, sphere, sector)
    union = st.lists(single, min_size=2, max_size=3).map(lambda m: RegionUnion(tuple(m)))
    return st.one_of(single, union, entity)


def oracle(live: dict[int, tuple[float, float]], prims) -> dict[int, set[int]]:
    """relay -> keys inside any of its primitives, point by point."""
    found: dict[int, set[int]] = {}
    for relay, _, view in prims:
        for key, (x, y) in live.items():
            inside = key == view.key if isinstance(view, Entity) else view.match([x], [y])[0]
            if inside:
                found.setdefault(relay, set()).add(key)
    return found


def keys_of(snapshots: dict[int, pa.Table]) -> dict[int, set[int]]:
    return {relay: set(t.column("id").to_pylist()) for relay, t in snapshots.items()}


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(changes, min_size=1, max_size=6),
    prims=st.lists(st.tuples(st.integers(0, 3), region()), max_size=6),
    rerun=st.booleans(),
)
def test_snapshots_are_the_live_rows_inside_each_relays_primitives(
    batches, prims, rerun: bool
) -> None:
    mirror = Mirror("id", ("x", "y"))
    live: dict[int, tuple[float, float]] = {}
    for seq, rows in enumerate(batches):
        mirror.apply(table(rows, seq), seq)
        if rerun:  # Spark re-runs a failed micro-batch with the same input
            mirror.apply(table(rows, seq), seq)
        for key, x, y, deleted in rows:
            if deleted:
                live.pop(key, None)
            else:
                live[key] = (x, y)
        assert mirror.holds(seq) and mirror.rows == len(live)
        numbered = [(relay, number, view) for number, (relay, view) in enumerate(prims)]
        snapshots = mirror.snapshots(numbered)
        assert keys_of(snapshots) == oracle(live, numbered)
        for part in snapshots.values():
            points = zip(part["x"].to_pylist(), part["y"].to_pylist(), strict=True)
            got = dict(zip(part["id"].to_pylist(), points, strict=True))
            assert got == {key: live[key] for key in got}
            assert part.column_names == ["id", "x", "y"]


def test_a_3d_dataset_is_cut_by_3d_regions() -> None:
    rng = np.random.default_rng(5)
    points = rng.uniform(0, 10, (300, 3))
    changes = pa.table(
        {
            "id": pa.array(np.arange(300), pa.int64()),
            "x": points[:, 0],
            "y": points[:, 1],
            "z": points[:, 2],
            "_deleted": np.zeros(300, dtype=bool),
        }
    )
    mirror = Mirror("id", ("x", "y", "z"))
    mirror.apply(changes, 0)
    sphere = Sphere((5.0, 5.0, 5.0), 3.0)
    box = Box((0.0, 0.0, 0.0), (4.0, 10.0, 2.0))
    got = keys_of(mirror.snapshots([(0, 1, sphere), (1, 2, box)]))
    x, y, z = points.T
    assert got[0] == set(np.flatnonzero(sphere.match(x, y, z)).tolist())
    assert got[1] == set(np.flatnonzero(box.match(x, y, z)).tolist())
    assert 0 < len(got[0]) < 300 and 0 < len(got[1]) < 300


def test_a_micro_batch_out_of_order_drops_it() -> None:
    mirror = Mirror("id", ("x", "y"))
    mirror.apply(table([(1, 1.0, 1.0, False)], 0), 0)
    mirror.apply(table([(2, 2.0, 2.0, False)], 1), 1)
    mirror.apply(table([(3, 3.0, 3.0, False)], 3), 3)  # 2 never came
    assert not mirror.holds(3) and mirror.seq == -1
    with pytest.raises(RuntimeError, match="not loaded"):
        mirror.snapshots([(0, 1, Box((0, 0), (9, 9)))])
    mirror.apply(table([(4, 4.0, 4.0, False)], 4), 4)  # not loaded: nothing to bring up to date
    assert not mirror.holds(4)
    mirror.load(table([(5, 5.0, 5.0, False)], 4), 4)  # a restart's read of the state store
    assert keys_of(mirror.snapshots([(0, 1, Box((0, 0), (9, 9)))])) == {0: {5}}


def test_a_state_larger_than_max_rows_is_left_to_the_state_store() -> None:
    mirror = Mirror("id", ("x", "y"), max_rows=2)
    mirror.apply(table([(1, 1.0, 1.0, False), (2, 2.0, 2.0, False)], 0), 0)
    assert mirror.holds(0)
    mirror.apply(table([(3, 3.0, 3.0, False)], 1), 1)
    assert mirror.too_big and not mirror.holds(1)
    mirror.load(table([(1, 1.0, 1.0, False)], 2), 2)  # too big once: until a restart
    assert not mirror.holds(2)
    assert Mirror("id", ("x", "y"), max_rows=0).too_big


def test_string_keys_and_a_missing_entity() -> None:
    mirror = Mirror("name", ("x", "y"))
    rows = pa.table(
        {
            "name": ["a", "b"],
            "x": [1.0, 50.0],
            "y": [1.0, 50.0],
            "_version": [1, 1],
            "_deleted": [False, False],
        }
    )
    mirror.apply(rows, 0)
    prims = [(7, 1, Entity("b")), (7, 2, Entity("zz")), (8, 3, Box((0, 0), (2, 2)))]
    assert keys_of_named(mirror.snapshots(prims)) == {7: {"b"}, 8: {"a"}}


def test_nulls_in_a_column_are_kept_as_nulls() -> None:
    mirror = Mirror("id", ("x", "y"))
    first = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "x": [1.0, 2.0],
            "y": [1.0, 2.0],
            "kind": pa.array([5, 6], pa.int32()),
            "_deleted": [False, False],
        }
    )
    mirror.apply(first, 0)
    later = pa.table(
        {
            "id": pa.array([2, 3], pa.int64()),
            "x": pa.array([2.5, None], pa.float64()),  # a row with no place is inside no region
            "y": [2.5, 3.0],
            "kind": pa.array([None, 7], pa.int32()),
            "_deleted": [False, False],
        }
    )
    mirror.apply(later, 1)
    got = mirror.snapshots([(0, 1, Box((0, 0), (9, 9))), (1, 2, Entity(3))])
    assert got[0].sort_by("id").to_pydict() == {
        "id": [1, 2],
        "x": [1.0, 2.5],
        "y": [1.0, 2.5],
        "kind": [5, None],
    }
    assert got[1].to_pydict() == {"id": [3], "x": [None], "y": [3.0], "kind": [7]}
    assert got[0].schema.field("kind").type == pa.int32()


def keys_of_named(snapshots: dict[int, pa.Table]) -> dict[int, set[str]]:
    return {relay: set(t.column("name").to_pylist()) for relay, t in snapshots.items()}


@pytest.mark.spark
def test_the_mirror_agrees_with_snapshots_read_from_the_state_store(spark, tmp_path) -> None:
    """A real streaming query: in every micro-batch the mirror's snapshots equal the ones the
    pipeline would read from Spark's state store; a second mirror loaded mid-stream (as after a
    restart) agrees from then on."""
    params = SimulationParams(agents=400, world=100.0, max_ticks=5, max_ticks_per_batch=1)
    dataset = agents(params, cell_size=10.0)
    matcher = matcher_for(dataset)
    checkpoint = str(tmp_path / "checkpoint")
    prims = [
        (0, 1, Box((10.0, 10.0), (40.0, 35.0))),
        (0, 2, Sphere((70.0, 70.0), 15.0)),
        (1, 3, Sector((50.0, 50.0), 30.0, math.pi / 2, 0.8)),
        (1, 4, Entity(7)),
        (2, 5, RegionUnion((Box((0.0, 0.0), (5.0, 100.0)), Sphere((95.0, 5.0), 10.0)))),
    ]
    mirror, restarted = Mirror("id", dataset.index_columns), Mirror("id", dataset.index_columns)
    compared: list[int] = []

    def deliver(changes, batch_id: int) -> None:
        state = current_state(spark, checkpoint, dataset, changes, batch_id)
        tables = matcher.tables(spark, prims)
        expected = rows_by_relay(matcher.match(state, tables).toArrow())
        tables.unpersist()
        assert sorted(expected) == [0, 1, 2]  # every relay's primitives hold rows
        rows = changes.toArrow()
        mirror.apply(rows, batch_id)
        if batch_id == 2:
            restarted.load(state.toArrow(), batch_id)
        else:
            restarted.apply(rows, batch_id)
        for each in (mirror, restarted) if batch_id >= 2 else (mirror,):
            got = each.snapshots(prims)
            assert sorted(got) == sorted(expected)
            for relay, part in got.items():
                want = expected[relay].sort_by("id")
                assert part.sort_by("id").to_pydict() == want.to_pydict()
        compared.append(batch_id)

    source = streams.stream(spark, dataset, start_time=time.time() - 100, state_dir=tmp_path)
    query = (
        latest_per_key(source, dataset)
        .writeStream.outputMode("update")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(deliver)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert compared == [0, 1, 2, 3, 4]
    assert mirror.rows == restarted.rows == 400
    assert np.all(np.diff(compared) == 1)


# -- topic, path and SQL datasets -------------------------------------------------------------

TOPICS = ["a", "a/b", "a/c", "b/c", "$SYS/x", "a/b/c", "x.y", None]
PATHS = ["/d/one", "/d/two", "/d/sub/three", "/e/one", "/top", "/d/", None]
NAMES = ["p", "q", "r", None]
keyed_change = st.tuples(
    st.integers(0, KEYS - 1),
    st.sampled_from(TOPICS),
    st.sampled_from(PATHS),
    st.one_of(st.none(), st.integers(0, 9)),
    st.sampled_from(NAMES),
    st.booleans(),
)
KeyedRow = tuple[str | None, str | None, int | None, str | None]


def keyed_table(rows: list[tuple], version: int) -> pa.Table:
    """One micro-batch's changed rows of a dataset with topic, path and SQL-queried columns."""
    latest = {row[0]: row[1:] for row in rows}
    keys = sorted(latest)
    column = {name: [latest[k][i] for k in keys] for i, name in enumerate(("topic", "path", "v"))}
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "topic": pa.array(column["topic"], pa.string()),
            "path": pa.array(column["path"], pa.string()),
            "v": pa.array(column["v"], pa.int32()),
            "name": pa.array([latest[k][3] for k in keys], pa.string()),
            "_version": pa.array([version] * len(keys), pa.int64()),
            "_deleted": pa.array([latest[k][4] for k in keys], pa.bool_()),
        }
    )


def mqtt_matches(topic_filter: str, topic: str) -> bool:
    """MQTT 3.1.1 section 4.7, level by level (the oracle)."""
    levels, names = topic_filter.split("/"), topic.split("/")
    if levels[0] in ("+", "#") and topic.startswith("$"):
        return False
    for at, level in enumerate(levels):
        if level == "#":
            return True  # also the parent level itself: "a/#" matches "a"
        if at >= len(names) or level not in ("+", names[at]):
            return False
    return len(levels) == len(names)


def in_path_scope(text: str, object_path: str) -> bool:
    """Whether the object at ``object_path`` is one the path ``text`` names, whole (the oracle)."""
    if not text.endswith("/.all"):
        return object_path == text
    directory = text[: -len(".all")]
    rest = object_path[len(directory) :]
    return object_path.startswith(directory) and rest != "" and "/" not in rest


topic_filters = st.sampled_from(["a", "a/+", "a/#", "+/c", "#", "+/+/c", "$SYS/#", "x.y"])
object_paths = st.sampled_from(["/d/.all", "/d/one", "/d/one?delta", "/e/.all", "/.all", "/top"])
sql_texts = st.sampled_from(
    [
        "SELECT * FROM t WHERE v > 3",
        "SELECT id FROM t WHERE v BETWEEN 2 AND 5 OR name = 'q'",
        "SELECT * FROM t WHERE name IS NULL",
        "SELECT * FROM t WHERE NOT (v <= 6) AND name IN ('p', 'r')",
        "SELECT * FROM t",
    ]
)


def sql_oracle(live: dict[int, KeyedRow], prim: SqlBox) -> set[int]:
    """The keys DuckDB's answer to the primitive's own query holds."""
    ids = sorted(live)
    t = pa.table(  # noqa: F841 (DuckDB reads it by its name)
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array([live[k][2] for k in ids], pa.int32()),
            "name": pa.array([live[k][3] for k in ids], pa.string()),
        }
    )
    query = str(prim).replace("SELECT *", "SELECT id", 1)
    return {row[0] for row in duckdb.sql(query).fetchall()}


@settings(max_examples=120, deadline=None)
@given(
    batches=st.lists(st.lists(keyed_change, max_size=12), min_size=1, max_size=5),
    topics=st.lists(st.tuples(st.integers(0, 3), topic_filters), max_size=5),
    paths=st.lists(st.tuples(st.integers(0, 3), object_paths), max_size=5),
    queries=st.lists(st.tuples(st.integers(0, 3), sql_texts), max_size=4),
)
def test_topic_path_and_sql_snapshots_are_the_live_rows_each_primitive_selects(
    batches, topics, paths, queries
) -> None:
    mirrors = {
        "topic": Mirror("id", ("topic",)),
        "path": Mirror("id", ("path",)),
        "sql": Mirror("id", ("v", "name")),
    }
    prims = {
        "topic": [(relay, n, TopicFilter(text)) for n, (relay, text) in enumerate(topics)],
        "path": [(relay, n, ObjectPath(text)) for n, (relay, text) in enumerate(paths)],
        "sql": [(relay, n, Sql(text).primitives()[0]) for n, (relay, text) in enumerate(queries)],
    }
    live: dict[int, KeyedRow] = {}
    for seq, rows in enumerate(batches):
        for mirror in mirrors.values():
            mirror.apply(keyed_table(rows, seq), seq)
        for key, topic, path, v, name, deleted in rows:
            if deleted:
                live.pop(key, None)
            else:
                live[key] = (topic, path, v, name)
        expected: dict[str, dict[int, set[int]]] = {kind: {} for kind in mirrors}
        for relay, _, view in prims["topic"]:
            hits = {k for k, row in live.items() if row[0] and mqtt_matches(view.filter, row[0])}
            expected["topic"].setdefault(relay, set()).update(hits)
        for relay, text in paths:
            scope = text.split("?")[0]
            hits = {k for k, row in live.items() if row[1] and in_path_scope(scope, row[1])}
            expected["path"].setdefault(relay, set()).update(hits)
        for relay, _, view in prims["sql"]:
            expected["sql"].setdefault(relay, set()).update(sql_oracle(live, view))
        for kind, mirror in mirrors.items():
            snapshots = mirror.snapshots(prims[kind])
            assert keys_of(snapshots) == {r: keys for r, keys in expected[kind].items() if keys}
            for part in snapshots.values():
                assert part.column_names == ["id", "topic", "path", "v", "name"]
                got = zip(part["topic"].to_pylist(), part["path"].to_pylist(), strict=True)
                for key, (topic, path) in zip(part["id"].to_pylist(), got, strict=True):
                    assert (topic, path) == live[key][:2]


@pytest.mark.spark
def test_the_mirror_selects_what_the_spark_matchers_select(spark) -> None:
    """One table with nulls and timestamps, mirrored: each kind's snapshots are the rows the
    publisher's Spark matcher pairs with each relay."""
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = pa.table(
        {
            "id": pa.array(range(8), pa.int64()),
            "topic": ["a/b", "a/c", "$SYS/x", None, "b", "a", "a/b/c", "x"],
            "path": ["/d/one", "/d/two", "/d/s/x", "/e", None, "/d/one", "/top", "/d/"],
            "amount": [1.0, 5.0, 10.0, None, float("nan"), 7.5, 99.0, 3.0],
            "at": pa.array(
                [stamp + datetime.timedelta(days=d) for d in range(7)] + [None],
                pa.timestamp("us", tz="UTC"),
            ),
            "_deleted": [False] * 8,
        }
    )
    sql = SqlMatcher("orders", frozenset(["id", "topic", "path", "amount", "at"]))
    cases = [
        ("topic", TopicMatcher("topic"), TopicFilter, ["a/#", "+/c", "#", "$SYS/+"]),
        ("path", PathMatcher("path"), ObjectPath, ["/d/.all", "/d/one?f=x>1", "/.all"]),
        (
            ("amount", "at"),
            sql,
            Sql,
            [
                "SELECT * FROM orders WHERE amount > 4",
                "SELECT * FROM orders WHERE at >= '2026-01-04' OR amount IS NULL",
                "SELECT * FROM orders WHERE amount >= 50",
            ],
        ),
    ]
    for index, matcher, kind, texts in cases:
        columns = (index,) if isinstance(index, str) else index
        prims = [(n % 2, n, matcher.check(kind(text))) for n, text in enumerate(texts)]
        tables = matcher.tables(spark, prims)
        try:
            frame = spark.createDataFrame(rows.drop_columns(["_deleted"]))
            expected = rows_by_relay(matcher.match(frame, tables).toArrow())
        finally:
            tables.unpersist()
        mirror = Mirror("id", columns)
        mirror.apply(rows, 0)
        got = mirror.snapshots(prims)
        assert keys_of(got) == keys_of(expected), index
        assert all(len(part) for part in got.values())
        for relay, part in got.items():
            assert comparable(part) == comparable(expected[relay])


def comparable(rows: pa.Table) -> dict[str, list[object]]:
    """The rows by key, NaN as a string (NaN equals nothing, itself included)."""
    plain = rows.sort_by("id").to_pydict()
    return {
        name: ["nan" if value != value else value for value in values]  # noqa: PLR0124
        for name, values in plain.items()
    }


def test_a_primitive_no_dataset_holds_is_refused() -> None:
    mirror = Mirror("id", ("topic",))
    mirror.apply(keyed_table([(1, "a", "/d/one", 1, "p", False)], 0), 0)
    with pytest.raises(TypeError, match="no Sql primitives"):
        mirror.snapshots([(0, 1, Sql("SELECT * FROM t"))])
