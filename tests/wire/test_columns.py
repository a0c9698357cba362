"""Columnar payloads: round trips bit for bit, and inconsistent payloads are protocol errors."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fanout.errors import ProtocolError
from fanout.wire.columns import (
    Column,
    Columns,
    decode_columns,
    encode_columns,
    from_values,
    key_column,
)

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


@st.composite
def nullable_columns(draw: st.DrawFn) -> tuple[str, list[object]]:
    """A column as Python values, ``None`` for NULL (the oracle: what a subscriber must see)."""
    rows = draw(st.integers(0, 40))
    values = {
        "<i8": st.integers(-(2**63), 2**63 - 1),
        "<i4": st.integers(-(2**31), 2**31 - 1),
        "<f8": st.floats(allow_nan=True),
        "|b1": st.booleans(),
        "str": st.text(max_size=5),
        "bytes": st.binary(max_size=5),
    }
    dtype = draw(st.sampled_from(sorted(values)))
    return dtype, draw(st.lists(st.none() | values[dtype], min_size=rows, max_size=rows))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True  # NaN is a number: it arrives as NaN
    return a == b and (a is None) == (b is None)


@given(st.lists(nullable_columns(), min_size=1, max_size=4))
def test_nulls_in_every_column_type_arrive_as_none(columns: list[tuple[str, list]]) -> None:
    rows = min(len(values) for _, values in columns)
    table: dict[str, np.ndarray] = {}
    for number, (dtype, drawn) in enumerate(columns):
        values = drawn[:rows]
        nulls = [value is None for value in values]
        if dtype in ("str", "bytes"):
            table[f"c{number}"] = from_values(values) if values else np.array([], dtype=object)
        else:
            data = np.array([0 if v is None else v for v in values], dtype=dtype)
            table[f"c{number}"] = np.ma.MaskedArray(data, mask=nulls)
        columns[number] = (dtype, values)
    wire = msgspec.msgpack.encode(encode_columns(table))
    back = decode_columns(msgspec.msgpack.decode(wire, type=Columns))
    for number, (_, values) in enumerate(columns):
        got = back[f"c{number}"].tolist()
        assert len(got) == len(values)
        assert all(_same(a, b) for a, b in zip(got, values, strict=True)), (got, values)


def test_a_column_without_nulls_carries_no_validity() -> None:
    payload = encode_columns({"a": np.ma.MaskedArray([1, 2], mask=[False, False])})
    assert [column.dtype for column in payload.columns] == ["<i8"]
    payload = encode_columns({"a": np.ma.MaskedArray([1, 2], mask=[False, True])})
    assert [column.dtype for column in payload.columns] == ["<i8", "valid"]
    assert payload.columns[1].data == bytes([0b01])


def test_python_values_with_none_become_a_masked_column() -> None:
    assert from_values([1, None, 3]).tolist() == [1, None, 3]
    assert from_values([1.5, None]).dtype == np.float64
    assert from_values([True, None]).tolist() == [True, None]
    assert from_values(["a", None]).tolist() == ["a", None]
    assert from_values([float("nan"), None]).tolist()[1] is None


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (Columns(1, [Column("a", "valid", b"\x01")]), "must follow"),
        (Columns(1, [Column("a", "str", ["x"]), Column("a", "valid", b"\x01")]), "must follow"),
        (Columns(1, [Column("a", "<i8", b"\0" * 8), Column("b", "valid", b"\x01")]), "follow"),
        (Columns(9, [Column("a", "|u1", b"\0" * 9), Column("a", "valid", b"\x01")]), "2 bytes"),
        (Columns(1, [Column("a", "<i8", b"\0" * 8), Column("a", "valid", [])]), "1 bytes"),
    ],
)
def test_bad_validity_is_a_protocol_error(payload: Columns, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_columns(payload)


def test_bytes_travel_as_offsets_and_data_with_a_validity_bitmap_for_their_nulls() -> None:
    values = [b"a\x00", None, b"", b"\x00\x00", b"\xff"]  # trailing NULs are kept
    payload = encode_columns({"b": from_values(values)})
    assert [(c.name, c.dtype) for c in payload.columns] == [("b", "bytes"), ("b", "valid")]
    offsets = np.frombuffer(payload.columns[0].data, "<u4", count=6)  # type: ignore[arg-type]
    assert offsets.tolist() == [0, 2, 2, 2, 4, 5]
    assert payload.columns[1].data == bytes([0b11101])
    back = decode_columns(msgspec.msgpack.decode(msgspec.msgpack.encode(payload), type=Columns))
    assert back["b"].tolist() == values
    assert [c.dtype for c in encode_columns({"b": from_values([b"x"])}).columns] == ["bytes"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (Columns(2, [Column("b", "bytes", b"\0" * 8)]), "need 12 bytes"),
        (Columns(1, [Column("b", "bytes", ["x"])]), "need 8 bytes"),
        (Columns(1, [Column("b", "bytes", b"\1\0\0\0\1\0\0\0x")]), "offsets do not fit"),
        (Columns(1, [Column("b", "bytes", b"\0\0\0\0\2\0\0\0x")]), "offsets do not fit"),
        (
            Columns(2, [Column("b", "bytes", b"\0\0\0\0\2\0\0\0\1\0\0\0xy")]),
            "offsets do not fit",
        ),
    ],
)
def test_bad_bytes_are_a_protocol_error(payload: Columns, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode_columns(payload)


def test_a_null_key_is_a_protocol_error() -> None:
    payload = encode_columns({"id": np.ma.MaskedArray([1, 2], mask=[False, True])})
    with pytest.raises(ProtocolError, match="holds a null"):
        key_column(payload, "id", "deletes")
