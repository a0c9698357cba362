"""Frames encode and decode per direction; garbage is a ProtocolError naming the problem."""

from __future__ import annotations

import msgspec
import pytest

from fanout.errors import ProtocolError
from fanout.views import Box, Sphere
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import PROTOCOL_VERSION, Acquire, Batch, Hello, Push, Subscribe


def test_a_subscribe_round_trips_with_its_view() -> None:
    frame = Subscribe(sub=3, dataset="agents", view=Box((0, 0), (10, 10)), rate=5.0)
    assert codec.to_relay().decode(codec.encode(frame)) == frame


def test_a_batch_round_trips() -> None:
    batch = Batch(
        dataset="agents",
        epoch=7,
        seq=12,
        tick=120,
        tick_time=1.5,
        upserts=encode_columns({"id": [1, 2], "x": [0.5, 1.5]}),
        deletes=encode_columns({"id": [9]}),
        snapshots=[4],
    )
    assert codec.from_publisher().decode(codec.encode(batch)) == batch


def test_frames_of_the_other_direction_are_refused() -> None:
    push = Push(1, 0, 0, 0, 0.0, True, encode_columns({}), encode_columns({}), encode_columns({}))
    with pytest.raises(ProtocolError, match="malformed frame"):
        codec.to_relay().decode(codec.encode(push))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1", "malformed frame"),
        (msgspec.msgpack.encode({"type": "nope"}), "Invalid value 'nope'"),
        (msgspec.msgpack.encode({"type": "subscribe", "sub": 1}), "missing required field"),
        (
            msgspec.msgpack.encode(
                {
                    "type": "subscribe",
                    "sub": 1,
                    "dataset": "a",
                    "view": {"kind": "box", "lo": [0, 0], "hi": [-1, 0]},
                }
            ),
            "lo\\[0\\] = 0.0 is greater than hi\\[0\\] = -1.0",
        ),
        ("a text message", "text messages are not part of the protocol"),
    ],
)
def test_garbage_is_a_protocol_error_that_says_why(data: bytes | str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        codec.to_relay().decode(data)


def test_the_publisher_decodes_acquire_with_any_region() -> None:
    frame = Acquire(prim=1, dataset="agents", view=Sphere((1, 2), 3))
    assert codec.to_publisher().decode(codec.encode(frame)) == frame


def test_hello_carries_the_protocol_version() -> None:
    hello = codec.to_relay().decode(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
    assert isinstance(hello, Hello)
    assert hello.version == PROTOCOL_VERSION
