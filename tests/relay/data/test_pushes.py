"""Cutting pushes from the active buffer: deltas, relative anchors, shared encoded bodies."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.relay.core.transforms import EntityNotHeld, resolve
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.data.pushes import Encodings, Held, both_members, cut, encode_push, members
from fanout.testing.catalog import AGENTS
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import Columns, decode_columns, encode_columns
from fanout.wire.messages import Push, Transform

VIEW = Box((0, 0), (10, 10))


def buffer_with(*steps: dict[int, tuple[float, float]]) -> DoubleBuffer:
    """A buffer after one swap per step, each step upserting its rows at seq = step number."""
    buffer = DoubleBuffer("id", AGENTS.columns, ("x", "y"))
    for seq, rows in enumerate(steps):
        advance(buffer, seq, rows)
    return buffer


def advance(buffer: DoubleBuffer, seq: int, rows: dict[int, tuple[float, float]]) -> None:
    keys = np.array(list(rows), dtype=np.int64)
    points = np.array(list(rows.values()), dtype=np.float64).reshape(-1, 2)
    buffer.upsert({"id": keys, "x": points[:, 0], "y": points[:, 1]}, seq)
    buffer.mark(Stamp(1, seq, 10 * seq, float(seq)))
    buffer.swap()


def columns(raw: msgspec.Raw) -> dict[str, np.ndarray]:
    return decode_columns(msgspec.msgpack.decode(raw, type=Columns))


def ids(raw: msgspec.Raw) -> list[int]:
    return sorted(columns(raw).get("id", np.empty(0)).tolist())


def test_the_first_push_is_the_whole_view_then_deltas() -> None:
    buffer = buffer_with({1: (1, 1), 2: (2, 2), 3: (30, 30)})
    shape = resolve(None, AGENTS)
    first = cut(VIEW, shape, None, buffer)
    assert first.full
    assert ids(first.entered) == [1, 2]
    advance(buffer, 1, {1: (1.5, 1.5), 2: (20, 20), 4: (4, 4)})
    held = Held(VIEW, generation=1, epoch=1, seq=0, keys=first.keys)
    second = cut(VIEW, shape, held, buffer)
    assert not second.full
    assert (ids(second.entered), ids(second.updated), ids(second.left)) == ([4], [1], [2])


def test_rows_relative_to_a_moving_entity_are_all_updated() -> None:
    buffer = buffer_with({1: (1, 1), 2: (2, 2)})
    shape = resolve(Transform(relative_to=2), AGENTS)
    first = cut(VIEW, shape, None, buffer)
    assert first.anchor == (2.0, 2.0)
    held = Held(VIEW, buffer.generation, 1, 0, first.keys, first.anchor)
    advance(buffer, 1, {2: (3, 3)})  # only the entity moved
    second = cut(VIEW, shape, held, buffer)
    assert ids(second.updated) == [1, 2]  # every coordinate changed relative to it
    assert columns(second.updated)["x"].tolist() == [-2.0, 0.0]


def test_an_entity_the_relay_does_not_hold_is_an_error_not_absolute_coordinates() -> None:
    buffer = buffer_with({1: (1, 1)})
    with pytest.raises(EntityNotHeld, match="entity 99"):
        cut(VIEW, resolve(Transform(relative_to=99), AGENTS), None, buffer)


def test_an_encoded_push_is_byte_identical_to_the_push_frame() -> None:
    buffer = buffer_with({1: (1, 1), 2: (2, 2)})
    body = cut(VIEW, resolve(None, AGENTS), None, buffer)
    stamp = Stamp(3, 4, 40, 12.5)
    frame = Push(
        sub=7,
        epoch=3,
        seq=4,
        tick=40,
        tick_time=12.5,
        full=True,
        entered=encode_columns(
            {"id": np.array([1, 2]), "x": np.array([1.0, 2.0]), "y": np.array([1.0, 2.0])}
        ),
        updated=encode_columns({}),
        left=encode_columns({"id": np.array([], dtype=np.int64)}),
    )
    assert encode_push(7, stamp, body) == codec.encode(frame)
    assert codec.to_subscriber().decode(encode_push(7, stamp, body)) == frame


def test_bodies_are_shared_within_one_generation_only() -> None:
    encodings = Encodings()
    buffer = buffer_with({1: (1, 1)})
    body = cut(VIEW, resolve(None, AGENTS), None, buffer)
    assert encodings.get("agents", 1, "key") is None
    encodings.put("agents", "key", body)
    assert encodings.get("agents", 1, "key") is body
    assert encodings.get("agents", 2, "key") is None  # a new state: a new cache
    assert (encodings.cut, encodings.shared, len(encodings)) == (1, 1, 0)


distinct_sorted = st.sets(st.integers(-50, 50), max_size=30).map(
    lambda values: np.array(sorted(values), dtype=np.int64)
)
distinct_sorted_text = st.sets(st.text("ab", max_size=3), max_size=10).map(
    lambda values: np.array(sorted(values), dtype=str)
)


@given(
    st.one_of(
        st.tuples(distinct_sorted, distinct_sorted),
        st.tuples(distinct_sorted_text, distinct_sorted_text),
    )
)
def test_membership_both_ways_is_set_membership(pair: tuple[np.ndarray, np.ndarray]) -> None:
    keys, among = pair
    present, back = both_members(keys, among)
    assert present.tolist() == [key in set(among.tolist()) for key in keys.tolist()]
    assert back.tolist() == [key in set(keys.tolist()) for key in among.tolist()]
    assert members(keys, among).tolist() == present.tolist()
