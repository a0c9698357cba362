"""Columnar row payloads: each column is a raw little-endian array (docs/protocol.md).

Numbers travel as the bytes of a numpy array, so a float64 arrives bit-for-bit as it left the
publisher; strings travel as a msgpack list. Decoding checks every length, so a truncated or
inconsistent payload is a :class:`ProtocolError`, never a silent misread.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.errors import ProtocolError

#: numpy dtypes that travel as raw little-endian bytes.
NUMERIC_DTYPES = frozenset(
    {"<i8", "<i4", "<f8", "<f4", "<i2", "|i1", "|u1", "<u2", "<u4", "<u8", "|b1"}
)
#: dtype marker for string columns (a msgpack list of str or None).
STRING = "str"


class Column(msgspec.Struct, array_like=True, frozen=True):
    """One named column: ``dtype`` is a little-endian numpy dtype string or ``"str"``."""

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
        arrays: column name -> 1-D array (numeric, bool or str/object).

    Returns:
        The payload; numeric arrays are converted to little-endian.

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
        columns.append(encode_column(name, array))
    return Columns(length=length or 0, columns=columns)


def encode_column(name: str, array: npt.NDArray[np.generic]) -> Column:
    """One 1-D array as a :class:`Column` (numeric columns little-endian)."""
    if array.dtype.kind in "OUS":
        return Column(name, STRING, [None if value is None else str(value) for value in array])
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    dtype = little.dtype.str
    if dtype not in NUMERIC_DTYPES:
        raise ValueError(f"column {name!r} has dtype {array.dtype} which cannot travel")
    return Column(name, dtype, np.ascontiguousarray(little).tobytes())


def decode_columns(payload: Columns) -> dict[str, npt.NDArray[np.generic]]:
    """Unpack a payload into numpy arrays (numeric ones are read-only views of the frame).

    Raises:
        ProtocolError: if a column's dtype is unknown or its size disagrees with ``length``.
    """
    if payload.length < 0:
        raise ProtocolError(f"columns: negative length {payload.length}")
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    for column in payload.columns:
        if column.name in arrays:
            raise ProtocolError(f"columns: duplicate column {column.name!r}")
        arrays[column.name] = _decode_column(column, payload.length)
    return arrays


def key_column(payload: Columns, key: str, what: str) -> npt.NDArray[np.generic]:
    """The ``key`` column of a payload that names rows by key (deletes, left rows).

    Args:
        payload: the columns.
        key: the key column's name.
        what: what the payload is, for the error (``"batch 7 deletes"``).

    Returns:
        The keys; an empty int64 array when the payload holds no rows.

    Raises:
        ProtocolError: the payload does not decode, or holds rows but no ``key`` column.
    """
    arrays = decode_columns(payload)
    if key in arrays:
        return arrays[key]
    if payload.length:
        raise ProtocolError(f"{what}: {payload.length} rows without the key column {key!r}")
    return np.empty(0, dtype=np.int64)


def _decode_column(column: Column, length: int) -> npt.NDArray[np.generic]:
    if column.dtype == STRING:
        if not isinstance(column.data, list) or len(column.data) != length:
            raise ProtocolError(f"column {column.name!r}: expected a list of {length} strings")
        return np.array(column.data, dtype=object)
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
