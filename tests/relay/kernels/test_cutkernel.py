"""The compiled kernel's turn is the numpy path's, array for array (oracle: ``compare_numpy``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data.batchcut import Turn, compare_compiled, compare_numpy, compiled
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.data.pushes import Held
from fanout.relay.data.spatial import GridIndex
from fanout.relay.kernels import compiled as kernel
from fanout.views import Box

AXES = ("x", "y", "z")


def buffer_of(dims: int, keys: np.ndarray, coords: np.ndarray, changed: np.ndarray) -> DoubleBuffer:
    """A double buffer of ``dims`` index axes whose active rows are ``keys`` at ``coords``,
    row ``i`` last changed at seq ``changed[i]``."""
    columns = {"id": "<i8"} | dict.fromkeys(AXES[:dims], "<f8")
    buffer = DoubleBuffer("id", columns, AXES[:dims])
    for seq in sorted(set(changed.tolist())):
        at = changed == seq
        buffer.upsert({"id": keys[at]} | {a: coords[at, i] for i, a in enumerate(AXES[:dims])}, seq)
    buffer.mark(Stamp(1, 9, 9, 9.0))
    buffer.stage_index()
    buffer.swap()
    return buffer


def same(got: Turn, expected: Turn, order: np.ndarray) -> None:
    """``got``'s positions are in the grid's cell order (``order`` maps them to the table's)."""
    assert got.columns is not expected.columns
    for name in ("rows", "entered", "updated"):
        assert order[getattr(got, name)].tolist() == getattr(expected, name).tolist(), name
    for name in ("rows_at", "entered_at", "updated_at", "gone", "gone_at"):
        assert getattr(got, name).tolist() == getattr(expected, name).tolist(), name
    for name, column in expected.columns.items():
        np.testing.assert_array_equal(got.columns[name], column[order], err_msg=name)


COORDINATES = st.one_of(
    st.floats(-50, 150),
    st.integers(-2, 22).map(lambda step: 5.0 * step),  # on the rows' lattice (see below)
    st.sampled_from([0.0, -0.0, 100.0, 1e308, -1e308, float("nan"), float("inf")]),
)


@settings(max_examples=200, deadline=None)
@given(
    dims=st.integers(2, 3),
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(0, 400),
    data=st.data(),
)
def test_the_kernel_cuts_a_turn_as_numpy_does(
    dims: int, seed: int, rows: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    views = data.draw(st.integers(0, 10), label="views")
    odd = data.draw(st.lists(COORDINATES, max_size=6), label="odd coordinates")
    keys = np.sort(rng.choice(2**62, rows, replace=False)).astype(np.int64) - 2**61
    coords = rng.uniform(-5, 105, (rows, dims))
    if rng.random() < 0.5:  # rows on a lattice of step 5: many sit on boxes' faces
        coords = np.round(coords / 5) * 5
    if rows:
        for value in odd:  # a few rows at extreme or non-finite coordinates
            coords[rng.integers(rows), rng.integers(dims)] = value
    buffer = buffer_of(dims, keys, coords, rng.integers(1, 4, rows))
    boxes = []
    for _ in range(views):
        corner = data.draw(st.lists(COORDINATES.filter(np.isfinite), min_size=dims, max_size=dims))
        side = rng.choice([0.0, 5.0, 30.0, 1e300], dims)
        high = tuple(min(c + s, 1.7e308) for c, s in zip(corner, side, strict=True))
        boxes.append(Box(tuple(corner), high))
    helds: list[Held | None] = []
    for box in boxes:
        if rng.random() < 0.25:
            helds.append(None)
            continue
        held = np.unique(
            np.concatenate([rng.choice(keys, min(rows, 30)), rng.integers(-(2**62), 2**62, 5)])
        )
        helds.append(Held(box, 0, 1, int(rng.integers(0, 4)), held, None, rng.random() < 0.2))
    table, index = buffer.active, buffer.index
    assert compiled(table, index, len(boxes)) == (rows > 0)
    if rows:
        same(
            compare_compiled(boxes, helds, table, index),
            compare_numpy(boxes, helds, table, index),
            index.order,
        )


def test_the_kernel_is_built_here() -> None:
    # make setup builds it (setup.py); without a C compiler the relay falls back to numpy.
    assert kernel.COMPILED, "the relay's kernels are not built: is a C compiler installed?"


def test_string_keys_take_the_numpy_path() -> None:
    buffer = DoubleBuffer("name", {"name": "str", "x": "<f8", "y": "<f8"}, ("x", "y"))
    buffer.upsert({"name": np.array(["a"], dtype=object), "x": [1.0], "y": [1.0]}, 1)
    buffer.mark(Stamp(1, 1, 1, 1.0))
    buffer.stage_index()
    buffer.swap()
    assert not compiled(buffer.active, buffer.index, 1)


def test_the_kernel_refuses_four_axes() -> None:
    if kernel.cutkernel is None:
        pytest.skip("kernel not built (test_the_kernel_is_built_here says so)")
    box, axes = np.zeros((1, 4)), np.ones(4)
    binned = [np.zeros(1)] * 4
    none = np.zeros(0, dtype=np.int64)
    with pytest.raises(ValueError, match="2 or 3 axes"):
        kernel.cutkernel.cut_turn(
            box, box, axes, axes, axes, 1, np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.intp),
            binned, none, none, none, np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.int64),
        )  # fmt: skip


def test_a_turn_too_large_for_the_sort_codes_takes_the_numpy_path() -> None:
    keys = np.arange(1000, dtype=np.int64)
    buffer = buffer_of(2, keys, np.zeros((1000, 2)), np.ones(1000, dtype=np.int64))
    assert compiled(buffer.active, buffer.index, 2**40)
    assert not compiled(buffer.active, buffer.index, 2**44)  # 45 + 2 * 10 bits > 63


FINITE = st.one_of(
    st.floats(-150, 150),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308]),
)


@settings(max_examples=300, deadline=None)
@given(
    dims=st.integers(2, 3),
    points=st.lists(st.lists(FINITE, min_size=3, max_size=3), min_size=1, max_size=40),
    corners=st.lists(
        st.tuples(
            st.lists(FINITE, min_size=3, max_size=3), st.lists(FINITE, min_size=3, max_size=3)
        ),
        max_size=8,
    ),
)
def test_the_kernel_finds_the_cells_a_box_spans_as_the_grid_does(
    dims: int, points: list[list[float]], corners: list[tuple[list[float], list[float]]]
) -> None:
    if kernel.cutkernel is None:
        pytest.skip("kernel not built (test_the_kernel_is_built_here says so)")
    coords = np.array(points)[:, :dims]
    index = GridIndex(list(coords.T))
    lo = np.array([np.minimum(a, b)[:dims] for a, b in corners]).reshape(len(corners), dims)
    hi = np.array([np.maximum(a, b)[:dims] for a, b in corners]).reshape(len(corners), dims)
    got = kernel.cutkernel.spans(lo, hi, index.origin, index.top, index.side_array, index.cells)
    expected = index.spans(lo, hi)
    assert got[0].tolist() == expected[0].tolist()
    assert got[1].tolist() == expected[1].tolist()
