"""Topic, path and SQL datasets' rows by key at the relay: snapshots and pruning
(relay/data/keyedstate.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data.buffers import Table
from fanout.relay.data.keyedstate import KeyedState, inside
from fanout.testing.catalog import sensors
from fanout.views.objects import parse as path
from fanout.views.sql import SqlBox
from fanout.views.topic import matches
from fanout.views.topic import parse as topic
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Batch, DatasetInfo

SENSORS = sensors()
OBJECTS = DatasetInfo(
    "objects", "path", {"path": "str", "state": "str", "rpm": "<i8"}, "path", ["path"]
)


def batch(seq: int, topics: list[str], snapshots: list[int] = ()) -> Batch:  # type: ignore[assignment]
    upserts = {"topic": np.array(topics, dtype=object), "value": np.ones(len(topics))}
    return Batch(
        "sensors", 1, seq, seq, 0.0, encode_columns(upserts), encode_columns({}), snapshots
    )


def test_a_snapshot_replaces_what_was_held_inside_its_primitive_only() -> None:
    state = KeyedState.of(SENSORS)
    state.write(batch(0, ["a/1", "a/2", "b/1"]))
    state.write(batch(1, ["a/3"]), [(7, topic("a/+"))])
    state.buffer.swap()
    assert state.table.keys.tolist() == ["a/3", "b/1"]
    assert state.readying == [7]


def test_released_primitives_are_pruned_except_where_another_holds_the_rows() -> None:
    state = KeyedState.of(SENSORS)
    state.write(batch(0, ["a/1", "a/2", "b/1"]))
    state.dropped.append((topic("a/#"), 0.0))
    state.prune(1.0, 2.0, kept=[topic("a/2")])
    state.buffer.swap()
    assert state.table.keys.tolist() == ["a/2", "b/1"]
    state.prune(5.0, 2.0, kept=[])  # the window is over: nothing more is pruned
    assert state.dropped == []


def test_primitives_of_each_kind_select_rows(table: Callable[..., Table]) -> None:
    rows = table(OBJECTS, path=["/c/1", "/c/2", "/c/2/door", "/t/1"], state=["a"] * 4, rpm=[1] * 4)
    assert inside([path("/c/.all?f=rpm>5")], rows, OBJECTS).tolist() == [True, True, False, False]
    sql_rows = table(OBJECTS, path=["/a", "/b"], state=["on", "off"], rpm=[1, 9])
    prim = SqlBox("objects", None, ())
    assert not inside([prim], sql_rows, OBJECTS).any()  # no boxes: no rows


TOPICS = st.lists(st.sampled_from(["a", "b", "$s"]), min_size=1, max_size=3).map("/".join)
FILTERS = st.sampled_from(["a/+", "a/#", "#", "+/b", "a/b/a", "$s/#", "+/+/+", "$share/g/a/#"])


@settings(max_examples=80, deadline=None)
@given(
    st.lists(TOPICS, min_size=1, max_size=12, unique=True),
    st.lists(FILTERS, min_size=1, max_size=3),
    st.lists(FILTERS, max_size=6),
)
def test_pruning_deletes_the_rows_of_released_primitives_no_kept_one_holds(
    topics: list[str], dropped: list[str], kept: list[str]
) -> None:
    state = KeyedState.of(SENSORS)
    state.write(batch(0, topics))
    state.dropped.extend((topic(text), 0.0) for text in dropped)
    state.prune(1.0, 2.0, kept=[topic(text) for text in kept])
    state.buffer.swap()

    def held(name: str, filters: list[str]) -> bool:
        return any(matches(text, name) for text in filters)

    want = sorted(name for name in topics if not held(name, dropped) or held(name, kept))
    assert state.table.keys.tolist() == want
