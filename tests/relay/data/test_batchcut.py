"""Cutting a round of box views at once gives, push for push, the bytes ``cut`` gives (oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.transforms import resolve
from fanout.relay.data import batchcut, pushes
from fanout.relay.data import buffers as state
from fanout.relay.data.batchcut import batchable, cut_boxes
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.data.pushes import Body, Held, cut
from fanout.views import Box, Sphere
from fanout.wire.messages import DatasetInfo, Transform

INT_KEYS = DatasetInfo(
    "agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8", "kind": "<i4"}, "space", ["x", "y"]
)
STR_KEYS = DatasetInfo(
    "things", "name", {"name": "str", "x": "<f8", "y": "<f8", "kind": "<i4"}, "space", ["x", "y"]
)
TRANSFORMS = [
    None,
    Transform(columns=["x"]),
    Transform(precision="float32"),
    Transform(precision="fixed", quantum=0.5),
    Transform(columns=["kind", "y"], quantum=2.0),
]


def step(
    buffer: DoubleBuffer, info: DatasetInfo, seq: int, rng: np.random.Generator, scale: int
) -> None:
    """Upsert a random subset of 300 possible rows, delete a few, and swap at seq ``seq``.

    Integer keys are multiplied by ``scale``: a large one spreads them over most of int64.
    """
    ids = np.flatnonzero(rng.random(300) < 0.5)
    names = np.array([f"n{i:03d}" for i in ids], dtype=object)
    keys = ids * scale if info.key == "id" else names
    buffer.upsert(
        {
            info.key: keys,
            "x": rng.uniform(-5, 105, len(ids)),
            "y": rng.uniform(-5, 105, len(ids)),
            "kind": (ids % 5).astype(np.int32),
        },
        seq,
    )
    if len(keys) and rng.random() < 0.5:
        buffer.delete(keys[rng.random(len(keys)) < 0.1])
    buffer.mark(Stamp(1, seq, seq, float(seq)))
    buffer.stage_index()
    buffer.swap()


def same(got: Body, expected: Body) -> None:
    assert got.keys.tolist() == expected.keys.tolist()
    assert (got.full, got.changes, got.anchor) == (expected.full, expected.changes, None)
    assert bytes(got.entered) == bytes(expected.entered)
    assert bytes(got.updated) == bytes(expected.updated)
    assert bytes(got.left) == bytes(expected.left)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    info=st.sampled_from([INT_KEYS, STR_KEYS]),
    transform=st.sampled_from(TRANSFORMS),
    views=st.integers(0, 12),
    scale=st.sampled_from([1, 2**54]),
)
def test_a_round_cut_at_once_is_byte_identical_to_cutting_each(
    seed: int, info: DatasetInfo, transform: Transform | None, views: int, scale: int
) -> None:
    check_round(seed, info, transform, views, scale)


def test_without_the_compiled_kernel_integer_keys_are_cut_with_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An install without a C compiler (setup.py): no kernels, no copy of the table in cell order.
    monkeypatch.setattr(batchcut, "cutkernel", None)
    monkeypatch.setattr(pushes, "packkernel", None)
    monkeypatch.setattr(state, "COMPILED", False)
    for seed in range(30):
        rng = np.random.default_rng(seed)
        transform = TRANSFORMS[int(rng.integers(len(TRANSFORMS)))]
        check_round(seed, INT_KEYS, transform, int(rng.integers(1, 13)), 1)


def check_round(
    seed: int, info: DatasetInfo, transform: Transform | None, views: int, scale: int
) -> None:
    """A round of ``views`` random boxes, against what random subscribers hold, cut at once and
    each alone, byte for byte."""
    rng = np.random.default_rng(seed)
    buffer = DoubleBuffer(info.key, info.columns, ("x", "y"))
    shape = resolve(transform, info)
    boxes = []
    for _ in range(views):
        corner = rng.uniform(-20, 100, 2)
        side = rng.choice([0.0, 5.0, 30.0, 200.0], 2)
        boxes.append(Box(tuple(corner), tuple(corner + side)))
    step(buffer, info, 1, rng, scale)
    # What each subscriber holds: nothing, its own view's last push (maybe flagged for a
    # refresh, maybe cut with an anchor), or another view's (the view moved since).
    helds: list[Held | None] = []
    for box in boxes:
        kind = rng.integers(0, 4)
        if kind == 0:
            helds.append(None)
            continue
        before = box if kind != 3 else boxes[int(rng.integers(0, len(boxes)))]
        body = cut(before, shape, None, buffer)
        anchor = (1.0, 2.0) if rng.random() < 0.1 else None
        helds.append(
            Held(before, buffer.generation, 1, 1, body.keys, anchor, bool(rng.random() < 0.2))
        )
    for seq in range(2, 2 + int(rng.integers(1, 3))):
        step(buffer, info, seq, rng, scale)
    bodies = cut_boxes(boxes, helds, shape, buffer)
    assert len(bodies) == len(boxes)
    assert (buffer.index.carried_changed is not None) == (state.COMPILED and info.key == "id")
    for box, held, body in zip(boxes, helds, bodies, strict=True):
        same(body, cut(box, shape, held, buffer))


def test_only_boxes_without_relative_coordinates_are_batched() -> None:
    box = Box((0, 0), (1, 1))
    assert batchable(box, resolve(None, INT_KEYS))
    assert not batchable(Sphere((0, 0), 1), resolve(None, INT_KEYS))
    assert not batchable(box, resolve(Transform(relative_to=3), INT_KEYS))
