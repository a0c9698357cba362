"""A view's window at the relay: its content at each of its last ticks, rebuilt from the pushes,
against the contents the pushes were made from."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.transducers.streams import SCHEMA, Content, contents, frames

from fanout.transducers import OverBudget
from fanout.transducers.window import Window, view_schema
from fanout.wire.columns import BYTES, STRING, TIMESTAMP, encode_columns
from fanout.wire.messages import NoUpdate, Push


def by_age(window: Window) -> dict[int, Content]:
    table = window.table().to_pylist()
    found: dict[int, Content] = {}
    for row in table:
        found.setdefault(row["_age"], {})[row["id"]] = (row["cell"], row["v"])
    return found


@settings(max_examples=100, deadline=None)
@given(ticks=contents(), length=st.integers(1, 5))
def test_the_window_holds_the_views_content_at_each_of_its_last_ticks(ticks, length) -> None:
    window = Window(SCHEMA, length, cells=10_000)
    for at, frame in enumerate(frames(ticks)):
        window.step(frame)
        kept = [content for content, _ in ticks[max(0, at + 1 - length) : at + 1]]
        expected = {age: content for age, content in enumerate(reversed(kept)) if content}
        assert by_age(window) == expected
        assert [tick.seq for tick in window.kept] == list(range(at + 2 - len(kept), at + 2))


def test_an_empty_window_has_the_views_columns_and_the_windows() -> None:
    window = Window(SCHEMA, 3, cells=10)
    assert window.table().column_names == ["id", "cell", "v", "_seq", "_tick", "_age"]
    window.step(NoUpdate(1, 1, 1, 10))
    assert window.table().num_rows == 0


def test_a_window_past_its_cells_stops_the_transducer() -> None:
    window = Window(SCHEMA, 3, cells=5)
    rows = encode_columns({"id": np.arange(3), "cell": np.zeros(3, np.int64), "v": np.zeros(3)})
    window.step(Push(1, 1, 1, 10, 1.0, True, rows, encode_columns({}), encode_columns({})))
    with pytest.raises(OverBudget, match="holds 6 rows over 2 ticks, more than the 5"):
        window.step(NoUpdate(1, 1, 2, 20))


def test_the_views_schema_comes_from_the_catalog_and_the_transform() -> None:
    types = {"id": "<i8", "x": "<f8", "name": STRING, "at": TIMESTAMP, "blob": BYTES}
    schema = view_schema(["id", "x", "name", "at", "blob", "computed"], types)
    assert schema.types == [
        pa.int64(),
        pa.float64(),
        pa.string(),
        pa.timestamp("us", tz="UTC"),
        pa.binary(),
        pa.null(),  # a SQL view's computed column: typed by its rows
    ]
    assert view_schema(["id", "x"], types, "fixed").types == [pa.int64(), pa.int64()]
    assert view_schema(["id", "x"], types, "float32").field("x").type == pa.float32()
    assert view_schema(["_key", "x"], types).field("_key").type == pa.string()
