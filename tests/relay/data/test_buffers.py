"""The relay's columnar table behaves like a dict of rows, kept sorted by key; the double buffer
shows writes only after a swap, and both its buffers agree after one, also when a worker installs
its leader's read-only state between writes (dict oracles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data.buffers import BEFORE_EPOCH, DoubleBuffer, Stamp, Table
from fanout.relay.data.spatial import GridIndex
from fanout.views import Box, Sphere

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.dictionaries(st.integers(-50, 50), st.floats(-1e6, 1e6), max_size=10),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(-60, 60), max_size=8)),
    ),
    max_size=30,
)


@settings(max_examples=200)
@given(operations)
def test_table_matches_a_dict_oracle(script: list) -> None:
    table = Table("id", {"id": "<i8", "x": "<f8", "name": "str"})
    oracle: dict[int, tuple[float, str]] = {}
    changed: dict[int, int] = {}
    for seq, (op, arg) in enumerate(script):
        if op == "upsert":
            keys = np.array(list(arg), dtype=np.int64)
            xs = np.array(list(arg.values()), dtype=np.float64)
            names = np.array([f"n{k}" for k in arg], dtype=object)
            table.upsert({"id": keys, "x": xs, "name": names}, seq)
            for key, x in arg.items():
                oracle[key] = (x, f"n{key}")
                changed[key] = seq
        else:
            table.delete(np.array(arg, dtype=np.int64))
            for key in arg:
                oracle.pop(key, None)
        assert table.keys.tolist() == sorted(oracle)
        assert table.column("x").tolist() == [oracle[k][0] for k in sorted(oracle)]
        assert table.column("name").tolist() == [oracle[k][1] for k in sorted(oracle)]
        assert table.changed.tolist() == [changed[k] for k in sorted(oracle)]


def test_delete_where_and_take() -> None:
    table = Table("id", {"id": "<i8", "x": "<f8"})
    table.upsert({"id": np.array([3, 1, 2]), "x": np.array([30.0, 10.0, 20.0])}, 0)
    table.delete_where(table.column("x") > 25)
    assert table.take(np.array([1]))["x"].tolist() == [20.0]
    assert len(table) == 2


@settings(max_examples=100)
@given(operations)
def test_a_table_keyed_by_strings_matches_a_dict_oracle(script: list) -> None:
    table = Table("name", {"name": "str", "x": "<f8"})
    oracle: dict[str, float] = {}
    for seq, (op, arg) in enumerate(script):
        if op == "upsert":
            names = np.array([f"k{k:+d}" for k in arg], dtype=object)
            table.upsert({"name": names, "x": np.array(list(arg.values()))}, seq)
            oracle.update({f"k{k:+d}": x for k, x in arg.items()})
        else:
            table.delete(np.array([f"k{k:+d}" for k in arg], dtype=object))
            for key in arg:
                oracle.pop(f"k{key:+d}", None)
        assert table.keys.tolist() == sorted(oracle)
        assert table.column("x").tolist() == [oracle[k] for k in sorted(oracle)]


def test_a_key_column_must_hold_integers_or_strings() -> None:
    with pytest.raises(ValueError, match="integers or strings"):
        Table("x", {"x": "<f8"})


POINT = st.tuples(st.integers(0, 40), st.floats(0, 100), st.floats(0, 100))
buffer_operations = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.lists(POINT, max_size=12, unique_by=lambda p: p[0])),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 45), max_size=6)),
        st.tuples(
            st.just("delete_inside"),
            st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(0, 60)),
        ),
        st.tuples(st.just("restart"), st.none()),
        st.tuples(st.just("swap"), st.none()),
        st.tuples(st.just("install"), st.lists(POINT, max_size=12, unique_by=lambda p: p[0])),
    ),
    max_size=40,
)
Oracle = dict[int, tuple[float, float, int]]


def rows_of(table: Table) -> Oracle:
    columns = [table.column(c).tolist() for c in ("x", "y")]
    return {
        key: (x, y, changed)
        for key, x, y, changed in zip(
            table.keys.tolist(), *columns, table.changed.tolist(), strict=True
        )
    }


def installed(rows: list[tuple[int, float, float]], seq: int) -> tuple[Table, GridIndex]:
    """A leader's whole state of ``rows`` as a worker maps it: read-only arrays, and its grid."""
    leader = DoubleBuffer("id", {"id": "<i8", "x": "<f8", "y": "<f8"}, ("x", "y"))
    keys, xs, ys = (list(column) for column in zip(*rows, strict=True)) if rows else ([], [], [])
    leader.upsert({"id": np.array(keys, np.int64), "x": np.array(xs), "y": np.array(ys)}, seq)
    leader.mark(Stamp(1, seq, seq, 0.0))
    leader.swap()
    columns = {name: values.copy() for name, values in leader.active.columns.items()}
    changed = leader.active.changed.copy()
    for values in [*columns.values(), changed]:
        values.flags.writeable = False
    return Table.restore(leader.active, columns, changed), leader.index


def inside(square: tuple[float, float, float]) -> Box:
    x, y, side = square
    return Box((x, y), (x + side, y + side))


@settings(max_examples=200)
@given(
    buffer_operations,
    st.sampled_from([0.0, 0.25, 1e9]),  # always copy, the default, always replay
    st.sampled_from([2, 256]),  # a log that overflows into a copy, and one that does not
    st.data(),
)
def test_the_double_buffer_shows_writes_only_after_a_swap(
    script: list, replay_limit: float, max_writes: int, data: st.DataObject
) -> None:
    columns = {"id": "<i8", "x": "<f8", "y": "<f8"}
    buffer = DoubleBuffer("id", columns, ("x", "y"), replay_limit, max_writes)
    written: Oracle = {}  # what the inert buffer must hold
    shown: Oracle = {}  # what the active buffer must hold
    for seq, (op, arg) in enumerate(script):
        if op == "upsert":
            keys, xs, ys = (
                (list(column) for column in zip(*arg, strict=True)) if arg else ([], [], [])
            )
            buffer.upsert(
                {"id": np.array(keys, dtype=np.int64), "x": np.array(xs), "y": np.array(ys)}, seq
            )
            written.update({k: (x, y, seq) for k, x, y in arg})
        elif op == "delete":
            buffer.delete(np.array(arg, dtype=np.int64))
            for key in arg:
                written.pop(key, None)
        elif op == "delete_inside":
            box = inside(arg)
            buffer.delete_inside([box])
            written = {k: r for k, r in written.items() if not box.match([r[0]], [r[1]])[0]}
        elif op == "restart":
            buffer.restart_changes()
            written = {k: (x, y, BEFORE_EPOCH) for k, (x, y, _) in written.items()}
        elif op == "install":  # a worker's: the leader's state in place of the inert table
            table, index = installed(arg, seq)
            buffer.install(table, index, Stamp(1, seq, seq, 0.0), seq)
            written = {k: (x, y, seq) for k, x, y in arg}
        else:
            buffer.mark(Stamp(1, seq, seq, 0.0))
            if data.draw(st.booleans()):
                buffer.stage_index()  # as the relay's worker thread does
            assert buffer.swap()
            shown = dict(written)
            buffer.catch_up()  # as the next write would
            assert rows_of(buffer.inert) == shown
            for view in (Box((0, 0), (50, 50)), Sphere((50, 50), 30)):
                columns = [buffer.active.column("x"), buffer.active.column("y")]
                expected = np.flatnonzero(view.match(*columns))
                assert buffer.query(view).tolist() == expected.tolist()
        assert rows_of(buffer.active) == shown  # never written while active (nor installed)
        assert rows_of(buffer.inert) == written


def test_a_swap_without_writes_changes_nothing() -> None:
    buffer = DoubleBuffer("id", {"id": "<i8", "x": "<f8", "y": "<f8"}, ("x", "y"))
    assert not buffer.swap()
    assert buffer.generation == 0
    buffer.mark(Stamp(1, 0, 0, 0.0))  # an empty batch is a new tick all the same
    assert buffer.swap()
    assert (buffer.generation, buffer.stamp) == (1, Stamp(1, 0, 0, 0.0))
    buffer.delete(np.array([5]))  # deletes nothing: not a write
    assert not buffer.dirty
