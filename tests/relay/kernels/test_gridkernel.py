"""The compiled grid builder builds exactly the grid numpy builds (``relay.kernels.gridkernel``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data import spatial
from fanout.relay.data.spatial import GridIndex
from fanout.relay.kernels.compiled import gridkernel

pytestmark = pytest.mark.skipif(gridkernel is None, reason="built without a C compiler")

ANYWHERE = st.one_of(
    st.floats(-200, 200, allow_nan=False),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([math.nan, math.inf, -math.inf, 1.7e308, -1.7e308, 0.0]),
)


def built(columns, carry, compiled: bool, monkeypatch: pytest.MonkeyPatch, per_cell: int):
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(spatial, "gridkernel", None)
        return GridIndex(columns, per_cell=per_cell, carry=carry)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_compiled_grid_is_the_numpy_grid(data: st.DataObject) -> None:
    dims = data.draw(st.sampled_from([1, 2, 3]))
    count = data.draw(st.integers(0, 300))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if data.draw(st.booleans()):
        columns = [rng.uniform(-100, 100, count) for _ in range(dims)]
        for column in columns:  # some points anywhere in floating point
            for at in data.draw(st.lists(st.integers(0, max(count - 1, 0)), max_size=5)):
                if count:
                    column[at] = data.draw(ANYWHERE)
    else:
        columns = [
            np.array(data.draw(st.lists(ANYWHERE, min_size=count, max_size=count)))
            for _ in range(dims)
        ]
    carry = (
        {
            "id": np.arange(count, dtype=np.int64),
            "kind": rng.integers(0, 9, count).astype(np.int32),
            "flag": rng.random(count) < 0.5,
            "small": rng.integers(0, 9, count).astype(np.int16),
        },
        rng.integers(-1, 50, count),
    )
    per_cell = data.draw(st.integers(1, 32))
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast = built(columns, carry, True, monkeypatch, per_cell)
        slow = built(columns, carry, False, monkeypatch, per_cell)
    assert (fast.cells, fast.lo, fast.hi, fast.side) == (slow.cells, slow.lo, slow.hi, slow.side)
    assert fast.order.dtype == slow.order.dtype
    assert fast.order.tolist() == slow.order.tolist()
    assert fast.offsets.tolist() == slow.offsets.tolist()
    for mine, theirs in zip(fast.binned, slow.binned, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert fast.carried.keys() == slow.carried.keys()
    for name, values in fast.carried.items():
        assert values.dtype == slow.carried[name].dtype
        np.testing.assert_array_equal(values, slow.carried[name])
    np.testing.assert_array_equal(fast.carried_changed, slow.carried_changed)


def test_a_string_column_is_carried_by_numpy() -> None:
    xy = [np.array([3.0, 1.0, 2.0]), np.array([0.0, 0.0, 0.0])]
    names = np.array(["c", "a", "b"], dtype=object)
    grid = GridIndex(xy, per_cell=1, carry=({"name": names}, np.zeros(3, dtype=np.int64)))
    assert grid.carried["name"].tolist() == names[grid.order].tolist() == ["a", "c", "b"]


def test_gather_refuses_what_it_cannot_copy() -> None:
    assert gridkernel is not None
    order = np.array([0, 2], dtype=np.intp)
    with pytest.raises(ValueError, match="not a contiguous array"):
        gridkernel.gather([np.array(["a", "b", "c"], dtype=object)], order)
    with pytest.raises(ValueError, match="not a contiguous array"):
        gridkernel.gather([np.arange(6.0)[::2]], order)
    with pytest.raises(ValueError, match="out of range"):
        gridkernel.gather([np.arange(2.0)], order)
    with pytest.raises(ValueError, match="out of range"):
        gridkernel.gather([np.arange(3.0)], np.array([-1], dtype=np.intp))
    assert gridkernel.gather([np.arange(3.0), np.arange(3, dtype=np.int8)], order)[1].tolist() == [
        0,
        2,
    ]


def test_bin_rows_refuses_mismatched_axes() -> None:
    assert gridkernel is not None
    finite = np.ones(2, dtype=np.uint8)
    with pytest.raises(ValueError, match="rows"):
        gridkernel.bin_rows([np.zeros(2), np.zeros(3)], finite, np.zeros(2), np.ones(2), 2)
    with pytest.raises(ValueError, match="at most 3"):
        gridkernel.finite_bounds([np.zeros(2)] * 4)
