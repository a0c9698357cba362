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


def to_numpy(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.generic]:
    """An Arrow column as numpy: a ``numpy.ma.MaskedArray`` (masked: null) if it holds a null.

    Strings come as an object array (``None`` where null, also unmasked: the wire's string
    columns carry their nulls in the list).
    """
    if column.null_count == 0 or pa.types.is_string(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    mask = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    kind = np.dtype(column.type.to_pandas_dtype()).kind
    fill = _FILL.get(kind)
    if fill is None:  # a type numpy holds as objects: its values, None where null
        return np.ma.MaskedArray(np.asarray(column.to_numpy(zero_copy_only=False)), mask=mask)
    filled = pc.fill_null(column, pa.scalar(fill, type=column.type))
    values = np.asarray(filled.to_numpy(zero_copy_only=False))
    return np.ma.MaskedArray(values, mask=mask)


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
    if mask is None or not mask.any():
        return pa.array(values)
    return pa.array(values, mask=mask)
