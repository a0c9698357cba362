"""Columnar payloads: round trips bit for bit, and inconsistent payloads are protocol errors."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fanout.errors import ProtocolError
from fanout.wire.columns import Column, Columns, decode_columns, encode_columns, key_column

NUMERIC = st.sampled_from(["<i8", "<i4", "<f8", "<f4", "|b1", "|u1"])


@st.composite
def tables(draw: st.DrawFn) -> dict[str, np.ndarray]:
    rows = draw(st.integers(0, 40))
    names = draw(
        st.lists(st.text("abcxyz_", min_size=1, max_size=6), min_size=1, max_size=5, unique=True)
    )
    table: dict[str, np.ndarray] = {}
    for name in names:
        if draw(st.booleans()):
            table[name] = draw(hnp.arrays(draw(NUMERIC), rows))
        else:
            table[name] = np.array(
                draw(st.lists(st.none() | st.text(max_size=5), min_size=rows, max_size=rows)),
                dtype=object,
            )
    return table


@given(tables())
def test_round_trip_through_msgpack_keeps_every_value(table: dict[str, np.ndarray]) -> None:
    wire = msgspec.msgpack.encode(encode_columns(table))
    back = decode_columns(msgspec.msgpack.decode(wire, type=Columns))
    assert list(back) == list(table)
    for name, values in table.items():
        if values.dtype == object:
            assert back[name].tolist() == values.tolist()
        else:
            assert back[name].dtype == values.dtype.newbyteorder("<")
            assert back[name].tobytes() == values.astype(back[name].dtype).tobytes()


def test_big_endian_arrays_travel_little_endian() -> None:
    values = np.arange(5, dtype=">f8")
    back = decode_columns(encode_columns({"v": values}))["v"]
    assert back.dtype == np.dtype("<f8")
    assert back.tolist() == values.tolist()


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="column 'b' has 2 rows, expected 3"):
        encode_columns({"a": np.zeros(3), "b": np.zeros(2)})


def test_a_dtype_that_cannot_travel_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot travel"):
        encode_columns({"c": np.zeros(2, dtype=np.complex128)})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (Columns(2, [Column("a", "<f8", b"\x00" * 8)]), "8 bytes, expected 2 rows x 8 bytes"),
        (Columns(1, [Column("a", "<f16", b"\x00" * 16)]), "unknown dtype"),
        (Columns(1, [Column("a", "str", ["x", "y"])]), "expected a list of 1 strings"),
        (Columns(1, [Column("a", "<i8", ["x"])]), "numeric data must be bytes"),
        (Columns(0, [Column("a", "<i8", b""), Column("a", "<i8", b"")]), "duplicate column"),
        (Columns(-1, []), "negative length"),
    ],
)
def test_inconsistent_payloads_are_protocol_errors(payload: Columns, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_columns(payload)


def test_the_key_column_of_a_payload_of_keys() -> None:
    keys = key_column(encode_columns({"id": np.array([3, 1], dtype=np.int64)}), "id", "deletes")
    assert keys.tolist() == [3, 1]
    assert key_column(encode_columns({}), "id", "deletes").tolist() == []
    with pytest.raises(ProtocolError, match="deletes: 2 rows without the key column 'id'"):
        key_column(encode_columns({"name": ["a", "b"]}), "id", "deletes")
