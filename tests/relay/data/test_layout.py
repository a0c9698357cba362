"""A table and its grid laid out in one piece of memory and read back (``relay.data.layout``):
the same rows, and the restored grid answers every box as a full scan of the rows does."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data import layout
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.views import Box

COLUMNS = {"id": "<i8", "x": "<f8", "y": "<f4", "hp": "<i4", "hp.valid": "|b1"}
finite = st.floats(-1e3, 1e3)
coordinate = finite | st.sampled_from([float("nan"), float("inf")])
rows = st.lists(
    st.tuples(st.integers(-1000, 1000), coordinate, coordinate, st.integers(-5, 5)),
    max_size=300,
    unique_by=lambda row: row[0],
)


def buffer_of(script: list[tuple[int, float, float, int]], seq: int = 7) -> DoubleBuffer:
    buffer = DoubleBuffer("id", COLUMNS, ("x", "y"))
    keys, xs, ys, hps = (list(c) for c in zip(*script, strict=True)) if script else ([],) * 4
    buffer.upsert(
        {
            "id": np.array(keys, np.int64),
            "x": np.array(xs),
            "y": np.array(ys, np.float32),
            "hp": np.array(hps, np.int32),
            "hp.valid": np.array([hp >= 0 for hp in hps], bool),
        },
        seq,
    )
    buffer.mark(Stamp(2, seq, seq + 1, 12.5))
    buffer.swap()
    return buffer


@settings(max_examples=100, deadline=None)
@given(script=rows, corners=st.lists(st.tuples(finite, finite), min_size=2, max_size=6))
def test_what_is_read_back_is_what_was_laid_out(
    script: list[tuple[int, float, float, int]], corners: list[tuple[float, float]]
) -> None:
    buffer = buffer_of(script)
    laid = layout.lay_out(buffer.active, buffer.index, buffer.stamp)  # type: ignore[arg-type]
    memory = memoryview(bytearray(laid.size))
    layout.write(memory, laid, 41)
    assert layout.generation_of(memory) == 41
    table, grid, stamp = layout.read(memory, buffer.active)
    assert stamp == buffer.stamp
    for name in COLUMNS:
        np.testing.assert_array_equal(table.column(name), buffer.active.column(name))
    np.testing.assert_array_equal(table.changed, buffer.active.changed)
    xs, ys = table.column("x"), table.column("y")
    for (x0, y0), (x1, y1) in itertools.pairwise(corners):
        box = Box((min(x0, x1), min(y0, y1)), (max(x0, x1), max(y0, y1)))
        with np.errstate(invalid="ignore"):
            assert grid.query(box).tolist() == np.flatnonzero(box.match(xs, ys)).tolist()


def test_a_reader_refuses_a_state_of_other_columns_and_strings_are_not_laid_out() -> None:
    buffer = buffer_of([(1, 1.0, 2.0, 3)])
    laid = layout.lay_out(buffer.active, buffer.index, buffer.stamp)  # type: ignore[arg-type]
    memory = memoryview(bytearray(laid.size))
    layout.write(memory, laid, 1)
    other = DoubleBuffer("id", {**COLUMNS, "y": "<f8"}, ("x", "y"))
    with pytest.raises(ValueError, match="not the dataset's"):
        layout.read(memory, other.active)
    with pytest.raises(ValueError, match="runs past the end"):
        layout.read(memory[: laid.size // 2], buffer.active)
    named = DoubleBuffer("id", {"id": "<i8", "x": "<f8", "y": "<f8", "name": "str"}, ("x", "y"))
    assert not layout.shareable(named.active)
    with pytest.raises(ValueError, match="objects"):
        layout.lay_out(named.active, named.index, Stamp(1, 1, 1, 1.0))
