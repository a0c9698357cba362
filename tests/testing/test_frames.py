"""A frame's header decoded from the real encoding, the rest skipped (testing/frames.py)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from fanout.testing.frames import Head, Rows, head, whole
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Error,
    Frame,
    NoUpdate,
    Push,
    Subscribed,
    Welcome,
)

ROWS = encode_columns({"id": np.arange(3, dtype=np.int64), "x": np.zeros(3)})
NONE = encode_columns({"id": np.arange(0, dtype=np.int64)})


def test_a_push_says_whose_it_is_and_its_stamp() -> None:
    push = Push(7, 1, 42, 420, 12.5, False, ROWS, NONE, NONE)
    assert head(codec.encode(push)) == Head("push", sub=7, seq=42, tick=420, tick_time=12.5)
    no_update = NoUpdate(7, 1, 43, 430)
    assert head(codec.encode(no_update)) == Head("no_update", sub=7, seq=43, tick=430)


def test_a_batch_says_its_stamp_snapshots_and_row_counts() -> None:
    batch = Batch("agents", 1, 5, 50, 3.0, ROWS, NONE, snapshots=[2, 4])
    assert head(codec.encode(batch)) == Head(
        "batch", seq=5, tick=50, tick_time=3.0, snapshots=[2, 4], upserts=Rows(3), deletes=Rows(0)
    )


def test_an_error_says_what_went_wrong_and_to_what() -> None:
    error = Error("invalid_view", "no such dataset", ref=3)
    assert head(codec.encode(error)) == Head(
        "error", code="invalid_view", message="no such dataset", ref=3
    )


@pytest.mark.parametrize(
    "frame",
    [
        Welcome(PROTOCOL_VERSION, "relay", "s"),
        Subscribed(1, "id", ["id", "x"]),
        Acquire(1, "agents", Box((0, 0), (1, 1))),
    ],
)
def test_any_other_frame_decodes_to_its_type(frame: Frame) -> None:
    encoded = codec.encode(frame)
    assert head(encoded).type == whole(encoded)["type"]  # type: ignore[index]


def test_the_whole_frame_can_be_quoted() -> None:
    error = Error("protocol", "bad")
    assert whole(codec.encode(error)) == {"type": "error", "code": "protocol", "message": "bad"}


def test_what_is_no_frame_is_refused() -> None:
    with pytest.raises(msgspec.DecodeError):
        head(b"\xc1")
    with pytest.raises(msgspec.ValidationError):
        head(msgspec.msgpack.encode({"sub": 1}))  # no type
