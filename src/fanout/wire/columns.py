"""Columnar row payloads: each column is a raw little-endian array (the layout: docs/protocol.md).

Numbers travel as the bytes of a numpy array (bit for bit), strings and decimals as a msgpack
list (``None`` for null), bytes in Arrow's binary layout (``length + 1`` uint32 offsets, then
the values). Any other column holding a null is followed by its validity bitmap (dtype
``"valid"``, Arrow's bit order); a column without nulls carries none. In numpy a column with
nulls is a ``numpy.ma.MaskedArray``; NaN is a number, never a null. Decoding checks every
length: a truncated or inconsistent payload is a :class:`ProtocolError`, never a misread.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.errors import ProtocolError

#: A timestamp: microseconds since 1970-01-01 00:00 UTC (numpy ``datetime64[us]``, in UTC).
TIMESTAMP = "<M8[us]"
#: A date: days since 1970-01-01 (numpy ``datetime64[D]``).
DATE = "<M8[D]"
#: numpy dtypes that travel as raw little-endian bytes.
NUMERIC_DTYPES = frozenset(
    {"<i8", "<i4", "<f8", "<f4", "<i2", "|i1", "|u1", "<u2", "<u4", "<u8", "|b1", TIMESTAMP, DATE}
)
#: dtype marker for string columns (a msgpack list of str or None).
STRING = "str"
#: dtype marker for exact decimal columns in a payload: a msgpack list of decimal strings or
#: None (a catalog names the type whole, ``decimal(p,s)``).
DECIMAL = "decimal"
#: dtype marker for bytes columns (offsets and values in one buffer, as Arrow's binary).
BYTES = "bytes"
#: A decimal's digits at most (as in DuckDB, PostgreSQL's common use and Arrow's decimal128).
MAX_PRECISION = 38
_DECIMAL_TYPE = re.compile(r"decimal\((\d+),(\d+)\)")


def decimal_type(dtype: str) -> tuple[int, int] | None:
    """(precision, scale) of a catalog's ``decimal(p,s)`` dtype, None for any other dtype."""
    found = _DECIMAL_TYPE.fullmatch(dtype)
    return (int(found[1]), int(found[2])) if found else None


#: dtype marker of a column's validity bitmap (follows the column it belongs to).
VALID = "valid"


class Column(msgspec.Struct, array_like=True, frozen=True):
    """One named column: ``dtype`` is a little-endian numpy dtype string, ``"str"``,
    ``"decimal"``, ``"bytes"``, or ``"valid"`` (the validity bitmap of the column of that
    name)."""

    name: str
    dtype: str
    data: bytes | list[str | None]


class Columns(msgspec.Struct, frozen=True):
    """A set of equally long columns: the rows of a batch or a push."""

    length: int = 0
    columns: list[Column] = []

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [column.name for column in self.columns]


def encode_columns(arrays: Mapping[str, npt.ArrayLike]) -> Columns:
    """Pack equally long arrays into a :class:`Columns` payload.

    Args:
        arrays: column name -> 1-D array (numeric, bool or str/object); a
            ``numpy.ma.MaskedArray`` holds nulls where it is masked.

    Returns:
        The payload; numeric arrays are converted to little-endian, each followed by its
        validity if it holds a null.

    Raises:
        ValueError: if the arrays differ in length or a dtype cannot travel.
    """
    columns: list[Column] = []
    length: int | None = None
    for name, values in arrays.items():
        array = np.asarray(values)
        if array.ndim != 1:
            raise ValueError(f"column {name!r} must be 1-D, got shape {array.shape}")
        if length is None:
            length = len(array)
        elif len(array) != length:
            raise ValueError(f"column {name!r} has {len(array)} rows, expected {length}")
        columns.extend(encode_nullable(name, values))
    return Columns(length=length or 0, columns=columns)


def encode_nullable(name: str, values: npt.ArrayLike) -> list[Column]:
    """A 1-D array as its :class:`Column`, followed by its validity if it holds a null
    (``values`` a masked array with a masked row; a string column's nulls are ``None``)."""
    mask = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else None
    if mask is None or not mask.any():
        array = np.asarray(values)
        return (
            encode_objects(name, array)
            if array.dtype.kind in "OS"
            else [encode_column(name, array)]
        )
    data = np.ma.getdata(values)
    if data.dtype.kind in "OUS":
        objects = np.array(data, dtype=object)
        objects[mask] = None
        return encode_objects(name, objects)
    return [encode_column(name, data), Column(name, VALID, validity(~mask))]


def from_values(values: Sequence[Any] | npt.ArrayLike) -> npt.NDArray[np.generic]:  # noqa: PLR0911
    """Python values as a column: ``None`` is a null (a masked row, or ``None`` in a string
    column); numbers, booleans and strings take numpy's usual dtypes.

    Args:
        values: a sequence of values (or an array, returned as it is).

    Returns:
        A numpy array, masked where null if any value is ``None`` and the others are not
        strings.
    """
    if isinstance(values, np.ndarray):
        return values
    items = list(values)  # type: ignore[arg-type]
    nulls = [value is None for value in items]
    present = [value for value in items if value is not None]
    if present and all(_aware(value) for value in present):
        instants = [value.astimezone(datetime.UTC).replace(tzinfo=None) for value in present]
        return _masked(items, nulls, np.array(instants, dtype=TIMESTAMP))
    if present and all(type(value) is datetime.date for value in present):
        return _masked(items, nulls, np.array(present, dtype=DATE))
    if present and all(isinstance(value, bytes | bytearray | memoryview) for value in present):
        out = np.empty(len(items), dtype=object)  # not numpy's bytes: they drop trailing NULs
        out[:] = [None if value is None else bytes(value) for value in items]
        return out
    if present and all(isinstance(value, decimal.Decimal | str) for value in present):
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out
    if any(isinstance(value, datetime.date | decimal.Decimal | bytes) for value in present):
        out = np.empty(len(items), dtype=object)  # mixed: travels as text, for the
        out[:] = items  # publisher to refuse with the column named
        return out
    if not any(nulls) or all(nulls):
        return np.asarray(items)
    filler = present[0]
    data = np.asarray([filler if null else value for value, null in zip(items, nulls, strict=True)])
    if data.dtype.kind == "f":
        data[np.asarray(nulls)] = np.nan
    return np.ma.MaskedArray(data, mask=nulls)


def _aware(value: Any) -> bool:
    return isinstance(value, datetime.datetime) and value.utcoffset() is not None


def _masked(
    items: Sequence[Any], nulls: Sequence[bool], present: npt.NDArray[np.generic]
) -> npt.NDArray[np.generic]:
    """``present`` (the non-null values) spread over ``len(items)`` rows, masked where null."""
    data = np.zeros(len(items), dtype=present.dtype)
    data[~np.asarray(nulls, dtype=bool)] = present
    return np.ma.MaskedArray(data, mask=nulls) if any(nulls) else data


def to_python(values: npt.NDArray[np.generic]) -> list[Any]:
    """A decoded column as Python values: ``None`` for NULL, timestamps as ``datetime`` in UTC,
    dates as ``date``, decimals as ``Decimal``, numbers and strings as themselves."""
    kind = values.dtype
    if kind == np.dtype(TIMESTAMP) or kind == np.dtype(DATE):
        mask = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else None
        plain: list[Any] = np.ma.getdata(values).tolist()
        if kind == np.dtype(TIMESTAMP):
            plain = [None if v is None else v.replace(tzinfo=datetime.UTC) for v in plain]
        if mask is not None:
            plain = [None if null else v for v, null in zip(plain, mask.tolist(), strict=True)]
        return plain
    out: list[Any] = values.tolist()
    return out


def validity(valid: npt.NDArray[np.bool_]) -> bytes:
    """The wire's validity bitmap of a boolean array (True: the row holds a value)."""
    return np.packbits(valid, bitorder="little").tobytes()


def encode_column(name: str, array: npt.NDArray[np.generic]) -> Column:
    """One 1-D array as a :class:`Column` (numeric columns little-endian; an object array of
    ``Decimal`` values as a decimal column, of ``bytes`` as a bytes column, its nulls empty:
    ``encode_objects`` adds their validity)."""
    if array.dtype.kind in "OUS":
        values = array.tolist()
        first = next((value for value in values if value is not None), None)
        # A column of one type: its first value says whether it is a decimal or bytes column.
        if isinstance(first, bytes):
            return Column(name, BYTES, pack_bytes(values))
        kind = DECIMAL if isinstance(first, decimal.Decimal) else STRING
        return Column(name, kind, [None if v is None else str(v) for v in values])
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    dtype = little.dtype.str
    if dtype not in NUMERIC_DTYPES:
        raise ValueError(f"column {name!r} has dtype {array.dtype} which cannot travel")
    return Column(name, dtype, np.ascontiguousarray(little).tobytes())


def encode_objects(name: str, array: npt.NDArray[np.generic]) -> list[Column]:
    """An object array (strings, decimals or bytes; ``None`` where null) as its columns: one,
    and for bytes with a null its validity after it."""
    column = encode_column(name, array)
    if column.dtype != BYTES:
        return [column]
    nulls = np.fromiter((value is None for value in array.tolist()), bool, len(array))
    if not nulls.any():
        return [column]
    return [column, Column(name, VALID, validity(~nulls))]


def pack_bytes(values: Sequence[bytes | None]) -> bytes:
    """Bytes values (None: null, packed as empty) in the wire's layout: offsets, then data."""
    data = b"".join(b"" if value is None else value for value in values)
    if len(data) >= 1 << 32:
        raise ValueError(f"{len(data)} bytes of values in one column: more than 4 GiB")
    ends = np.fromiter(
        (0 if value is None else len(value) for value in values), np.int64, len(values)
    )
    offsets = np.zeros(len(values) + 1, dtype="<u4")
    offsets[1:] = np.cumsum(ends)
    return offsets.tobytes() + data


def _unpack_bytes(column: Column, length: int) -> npt.NDArray[np.generic]:
    """A bytes column's values as an object array of ``bytes``.

    Raises:
        ProtocolError: the data is not bytes, or its offsets do not fit the layout.
    """
    data = column.data
    head = 4 * (length + 1)
    if not isinstance(data, bytes) or len(data) < head:
        raise ProtocolError(f"column {column.name!r}: bytes of {length} rows need {head} bytes")
    offsets = np.frombuffer(data, dtype="<u4", count=length + 1).astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != len(data) - head or np.any(np.diff(offsets) < 0):
        raise ProtocolError(f"column {column.name!r}: bytes offsets do not fit the data")
    starts = (offsets + head).tolist()
    out = np.empty(length, dtype=object)
    out[:] = [data[start:end] for start, end in itertools.pairwise(starts)]
    return out


def decode_columns(payload: Columns) -> dict[str, npt.NDArray[np.generic]]:
    """Unpack a payload into numpy arrays (numeric ones are read-only views of the frame); a
    column with a validity bitmap becomes a ``numpy.ma.MaskedArray``, masked where null.

    Raises:
        ProtocolError: if a column's dtype is unknown, its size disagrees with ``length``, or
            a validity bitmap does not follow a numeric column of its name.
    """
    if payload.length < 0:
        raise ProtocolError(f"columns: negative length {payload.length}")
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    last: Column | None = None
    for column in payload.columns:
        if column.dtype == VALID:
            if last is None or last.name != column.name or last.dtype in (STRING, DECIMAL, VALID):
                raise ProtocolError(
                    f"column {column.name!r}: a validity bitmap must follow the numeric or bytes"
                    " column of its name"
                )
            valid = _decode_validity(column, payload.length)
            if last.dtype == BYTES:  # held as objects: None where null
                arrays[column.name][~valid] = None  # type: ignore[assignment]
            else:
                arrays[column.name] = np.ma.MaskedArray(arrays[column.name], mask=~valid)
        elif column.name in arrays:
            raise ProtocolError(f"columns: duplicate column {column.name!r}")
        else:
            arrays[column.name] = _decode_column(column, payload.length)
        last = column
    return arrays


def _decode_validity(column: Column, length: int) -> npt.NDArray[np.bool_]:
    if not isinstance(column.data, bytes) or len(column.data) != (length + 7) // 8:
        raise ProtocolError(
            f"column {column.name!r}: a validity bitmap of {length} rows is"
            f" {(length + 7) // 8} bytes"
        )
    bits = np.unpackbits(np.frombuffer(column.data, dtype=np.uint8), bitorder="little")
    return bits[:length].astype(bool)


def key_column(payload: Columns, key: str, what: str) -> npt.NDArray[np.generic]:
    """The ``key`` column of a payload that names rows by key (deletes, left rows).

    Args:
        payload: the columns.
        key: the key column's name.
        what: what the payload is, for the error (``"batch 7 deletes"``).

    Returns:
        The keys; an empty int64 array when the payload holds no rows.

    Raises:
        ProtocolError: the payload does not decode, holds rows but no ``key`` column, or a
            null key.
    """
    arrays = decode_columns(payload)
    if key in arrays:
        if isinstance(arrays[key], np.ma.MaskedArray):
            raise ProtocolError(f"{what}: the key column {key!r} holds a null")
        return arrays[key]
    if payload.length:
        raise ProtocolError(f"{what}: {payload.length} rows without the key column {key!r}")
    return np.empty(0, dtype=np.int64)


def _decode_column(column: Column, length: int) -> npt.NDArray[np.generic]:
    if column.dtype in (STRING, DECIMAL):
        if not isinstance(column.data, list) or len(column.data) != length:
            raise ProtocolError(f"column {column.name!r}: expected a list of {length} strings")
        if column.dtype == STRING:
            return np.array(column.data, dtype=object)
        try:
            exact = [None if v is None else decimal.Decimal(v) for v in column.data]
        except (decimal.InvalidOperation, TypeError, ValueError) as exc:
            raise ProtocolError(f"column {column.name!r}: not a decimal: {exc}") from None
        out = np.empty(length, dtype=object)
        out[:] = exact
        return out
    if column.dtype == BYTES:
        return _unpack_bytes(column, length)
    if column.dtype not in NUMERIC_DTYPES:
        raise ProtocolError(f"column {column.name!r}: unknown dtype {column.dtype!r}")
    if not isinstance(column.data, bytes):
        raise ProtocolError(f"column {column.name!r}: numeric data must be bytes")
    dtype = np.dtype(column.dtype)
    if len(column.data) != length * dtype.itemsize:
        raise ProtocolError(
            f"column {column.name!r}: {len(column.data)} bytes, expected"
            f" {length} rows x {dtype.itemsize} bytes"
        )
    return np.frombuffer(column.data, dtype=dtype)
