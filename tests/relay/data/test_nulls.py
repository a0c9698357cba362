"""NULL at the relay (relay/data/nulls.py, relay/data/intake.py): held beside each nullable column,
in no region, refused where the catalog allows none, sent on as NULL."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from fanout.errors import ProtocolError
from fanout.relay.data.intake import DatasetState
from fanout.relay.data.pushes import encode_rows
from fanout.views import Box
from fanout.wire.columns import Columns, decode_columns, encode_columns, to_python
from fanout.wire.messages import Batch, DatasetInfo

SPACE = DatasetInfo(
    "things",
    "id",
    {"id": "<i8", "x": "<f8", "y": "<f8", "n": "<i4", "label": "str"},
    "space",
    ["x", "y"],
    nullable=["x", "y", "n", "label"],
)


def batch(seq: int, **columns: np.ndarray) -> Batch:
    return Batch("things", 1, seq, seq, 0.0, encode_columns(columns), Columns(), [])


def masked(values: list, dtype: str) -> np.ndarray:
    nulls = [v is None for v in values]
    return np.ma.MaskedArray(np.array([0 if v is None else v for v in values], dtype), mask=nulls)


def test_a_row_with_a_null_coordinate_is_in_no_region_and_its_nulls_go_on_as_nulls() -> None:
    state = DatasetState.of(SPACE, ("x", "y"))
    state.write(
        batch(
            0,
            id=np.array([1, 2, 3]),
            x=masked([1.0, None, 2.0], "<f8"),
            y=np.array([1.0, 1.0, 2.0]),
            n=masked([None, 5, 6], "<i4"),
            label=np.array(["a", None, "c"], dtype=object),
        )
    )
    assert state.buffer.swap()
    inside = state.buffer.query(Box((-1e9, -1e9), (1e9, 1e9)))
    assert state.table.keys[inside].tolist() == [1, 3]  # row 2's x is NULL: in no region
    rows = state.table.take(inside, ["id", "n", "label"])
    wire = msgspec.msgpack.decode(bytes(encode_rows(rows)), type=Columns)
    got = {name: to_python(values) for name, values in decode_columns(wire).items()}
    assert got == {"id": [1, 3], "n": [None, 6], "label": ["a", "c"]}


def test_a_null_where_the_catalog_allows_none_is_a_protocol_error() -> None:
    strict = DatasetInfo("things", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
    state = DatasetState.of(strict, ("x", "y"))
    with pytest.raises(ProtocolError, match="column 'x' holds a NULL but may not"):
        state.write(batch(0, id=np.array([1]), x=masked([None], "<f8"), y=np.array([1.0])))
    assert not state.buffer.dirty  # nothing of it was written


@pytest.mark.parametrize(
    ("nullable", "message"),
    [(["id"], "nullable column 'id'"), (["zz"], "nullable column 'zz'")],
)
def test_a_catalog_with_a_nullable_key_or_unknown_column_is_refused(
    nullable: list[str], message: str
) -> None:
    info = DatasetInfo("t", "id", {"id": "<i8", "v": "<f8"}, "sql", ["id", "v"], nullable=nullable)
    with pytest.raises(ProtocolError, match=message):
        DatasetState.of(info)
