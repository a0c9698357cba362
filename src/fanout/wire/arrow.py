"""Arrow columns to and from the wire's numpy columns, NULLs kept (``wire.columns``).

Only the relay and the publisher use this module: they install pyarrow (the ``relay`` and
``publisher`` extras); the subscriber library does not import it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

#: What fills a null's slot in a numpy column (its validity says it is null; NaN for floats, so
#: a NULL coordinate is inside no region).
_FILL = {"f": np.nan, "i": 0, "u": 0, "b": False}


#: Arrow types held in numpy as objects, ``None`` where null.
_OBJECTS = (
    pa.types.is_decimal,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def to_numpy(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.generic]:
    """An Arrow column as numpy: a ``numpy.ma.MaskedArray`` (masked: null) if it holds a null.

    Strings come as an object array, decimals as one of ``Decimal`` and bytes as one of
    ``bytes`` (``None`` where null, also unmasked, as the relay holds them);
    timestamps as ``datetime64[us]`` in UTC, dates as ``datetime64[D]``.
    """
    kind = column.type
    if pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp("us"))  # the instants, in UTC (Arrow stores UTC)
    elif pa.types.is_date(kind):
        column = column.cast(pa.date32())
    if any(test(kind) for test in _OBJECTS):
        values = np.empty(len(column), dtype=object)
        values[:] = column.to_pylist()
        return values
    if column.null_count == 0:
        return _plain(column)
    mask = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
        width = pa.int32() if pa.types.is_date(column.type) else pa.int64()
        filled = pc.fill_null(column, pa.scalar(0, type=width).cast(column.type))
        return np.ma.MaskedArray(_plain(filled), mask=mask)
    fill = _FILL.get(np.dtype(column.type.to_pandas_dtype()).kind)
    if fill is None:  # a type numpy holds as objects: its values, None where null
        return np.ma.MaskedArray(np.asarray(column.to_numpy(zero_copy_only=False)), mask=mask)
    filled = pc.fill_null(column, pa.scalar(fill, type=column.type))
    return np.ma.MaskedArray(_plain(filled), mask=mask)


def _plain(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.generic]:
    if pa.types.is_date(column.type):  # Arrow gives dates as datetime64[D] only by way of ms
        return np.asarray(column.cast(pa.int32()).to_numpy(zero_copy_only=False)).astype(
            "datetime64[D]"
        )
    return np.asarray(column.to_numpy(zero_copy_only=False))


def to_arrow(
    values: npt.NDArray[np.generic], valid: npt.NDArray[np.generic] | None = None
) -> pa.Array:
    """A numpy column as Arrow, null where ``valid`` is False (or where a masked array is
    masked)."""
    mask: npt.NDArray[np.bool_] | None = None
    if valid is not None:
        mask = ~np.asarray(valid, dtype=bool)
    if isinstance(values, np.ma.MaskedArray):
        nulls = np.ma.getmaskarray(values)
        values = np.ma.getdata(values)
        mask = nulls if mask is None else mask | nulls
    if values.dtype.kind == "M":  # timestamps are instants (UTC in Arrow); dates are days
        if values.dtype == np.dtype("datetime64[D]"):
            days = values.astype(np.int64).astype(np.int32)
            return pa.array(days, type=pa.int32(), mask=mask).cast(pa.date32())
        micros = values.astype("datetime64[us]").astype(np.int64)
        return pa.array(micros, type=pa.int64(), mask=mask).cast(pa.timestamp("us", tz="UTC"))
    if mask is None or not mask.any():
        return pa.array(values)
    return pa.array(values, mask=mask)
