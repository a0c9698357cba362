"""Topic, path and SQL datasets' rows by key: snapshots, pruning, and view matching
(relay/keyed.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.keyed import KeyedState, TopicMatches, inside, path_columns, path_positions
from fanout.relay.state import Table
from fanout.views.objects import parse as path
from fanout.views.sql import SqlBox
from fanout.views.topic import matches
from fanout.views.topic import parse as topic
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Batch, DatasetInfo

SENSORS = DatasetInfo("sensors", "topic", {"topic": "str", "value": "<f8"}, "topic", ["topic"])
OBJECTS = DatasetInfo(
    "objects", "path", {"path": "str", "state": "str", "rpm": "<i8"}, "path", ["path"]
)


def table(info: DatasetInfo, **columns: list) -> Table:
    rows = Table(info.key, info.columns)
    arrays = {
        name: np.array(values, dtype=object if info.columns[name] == "str" else None)
        for name, values in columns.items()
    }
    rows.upsert(arrays, 0)
    return rows


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


def test_primitives_of_each_kind_select_rows() -> None:
    rows = table(OBJECTS, path=["/c/1", "/c/2", "/c/2/door", "/t/1"], state=["a"] * 4, rpm=[1] * 4)
    assert inside([path("/c/.all?f=rpm>5")], rows, OBJECTS).tolist() == [True, True, False, False]
    sql_rows = table(OBJECTS, path=["/a", "/b"], state=["on", "off"], rpm=[1, 9])
    prim = SqlBox("objects", None, ())
    assert not inside([prim], sql_rows, OBJECTS).any()  # no boxes: no rows


def test_a_path_view_filters_objects_and_names_its_attributes() -> None:
    rows = table(
        OBJECTS,
        path=["/c/1", "/c/2", "/c/3", "/d/1"],
        state=["on", "off", "on", "on"],
        rpm=[900, 5000, 6000, 7000],
    )
    view = path("/c/.all?delta,f=state+rpm>4000")
    assert rows.keys[path_positions(view, rows, OBJECTS)].tolist() == ["/c/2", "/c/3"]
    # f= names the attributes sent (state) and the comparisons that filter (rpm>4000)
    assert path_columns(view, ["path", "state", "rpm"], "path") == ("path", "state")
    assert path_columns(path("/c/1"), ["path", "state", "rpm"], "path") == ("path", "state", "rpm")


TOPICS = st.lists(st.sampled_from(["a", "b", "$s"]), min_size=1, max_size=3).map("/".join)
FILTERS = st.sampled_from(["a/+", "a/#", "#", "+/b", "a/b/a", "$s/#", "+/+/+", "$share/g/a/#"])


@settings(max_examples=60, deadline=None)
@given(st.lists(TOPICS, max_size=12, unique=True), st.lists(FILTERS, min_size=1, max_size=4))
def test_topic_matches_equal_a_brute_force_oracle(topics: list[str], filters: list[str]) -> None:
    rows = table(SENSORS, topic=topics, value=[0.0] * len(topics))
    matcher = TopicMatches()
    views = [topic(text) for text in filters]
    for view in views:
        found = rows.keys[matcher.positions(view, rows, SENSORS, 1, lambda: views)].tolist()
        want = sorted(t for t in topics if matches(view.filter, t))
        assert found == want
    assert matcher.passes == 1  # every filter of the dataset in one pass over its topics


def test_rows_whose_topic_is_no_topic_name_are_matched_by_nothing() -> None:
    # One such row (from a files source, say) made every topic view of the dataset fail.
    rows = table(SENSORS, topic=["a", "", "b/#", "c"], value=[1.0, 2.0, 3.0, 4.0])
    views = [topic("#"), topic("+")]
    matcher = TopicMatches()
    found = [rows.keys[matcher.positions(v, rows, SENSORS, 1, lambda: views)] for v in views]
    assert [f.tolist() for f in found] == [["a", "c"], ["a", "c"]]
    assert matcher.not_topics == 2  # one pass for both filters: "" and "b/#"


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
