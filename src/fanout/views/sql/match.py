"""Vectorised matching of rows against SQL primitives (a union of boxes over one table): the
relay keeps a batch's rows inside a primitive, tests compare with DuckDB. Rules (DuckDB's):

1. NULL is in a value set only by its ``null`` flag; comparisons never hold on NULL.
2. Float NaN is the largest number: in every interval unbounded above, in no other.
3. Numbers compare across integer, float and decimal; dates and timestamps as days or
   microseconds (a DATE against a TIMESTAMP bound at midnight; zone-aware ones in UTC); strings
   against DATE or TIMESTAMP columns read as ISO dates.
4. Batches are ``pyarrow`` tables or batches, or name -> numpy array (NULL masked, ``None`` or
   NaT); column names match case-insensitively.
5. A bytes column is not bounded by value: intervals hold every non-NULL row (a superset; the
   relay evaluates the predicate itself), as ``views.sql.to_spark`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fanout.views.sql.boxes import Box
from fanout.views.sql.literals import Constant, coerce
from fanout.views.sql.values import Domain, Interval, Scalar, ValueSet

Batch: TypeAlias = "pa.Table | pa.RecordBatch | Mapping[str, Any]"
Mask: TypeAlias = npt.NDArray[np.bool_]

_MICROS_PER_DAY = 86_400_000_000


def match(boxes: Sequence[Box], batch: Batch) -> Mask:
    """Return which rows of ``batch`` lie in the union of ``boxes``.

    Args:
        boxes: a primitive's union of boxes.
        batch: the rows (see the module rules for the accepted forms).

    Returns:
        A numpy bool array, one entry per row.

    Raises:
        KeyError: the batch lacks a column a box constrains.
        TypeError: a column's values cannot be compared with the box's bounds (a string column
            against numeric bounds, say).
        ValueError: the batch is an empty mapping, so its length is unknown.
    """
    columns, length = _columns(batch)
    mask = np.zeros(length, dtype=bool)
    for box in boxes:
        inside = np.ones(length, dtype=bool)
        for column, values in box.ranges:
            if column not in columns:
                raise KeyError(f"the batch has no column {column!r}; it has {sorted(columns)}")
            inside &= member(columns[column], values, column)
        mask |= inside
    return mask


def _columns(batch: Batch) -> tuple[dict[str, pa.ChunkedArray | pa.Array], int]:
    """Return the batch's columns by lower-case name, and its number of rows."""
    if isinstance(batch, pa.Table | pa.RecordBatch):
        names = batch.schema.names
        return {name.lower(): batch.column(i) for i, name in enumerate(names)}, batch.num_rows
    columns = {name.lower(): _arrow(array) for name, array in batch.items()}
    if not columns:
        raise ValueError("an empty mapping has no rows to match; pass at least one column")
    lengths = {len(array) for array in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"the batch's columns differ in length: {sorted(lengths)}")
    return columns, lengths.pop()


def _arrow(array: Any) -> pa.Array | pa.ChunkedArray:
    """Convert one numpy column to Arrow, reading NULLs as the module rules say."""
    if isinstance(array, pa.Array | pa.ChunkedArray):
        return array
    if np.ma.isMaskedArray(array):
        return pa.array(np.ma.getdata(array), mask=np.ma.getmaskarray(array))
    values = np.asarray(array)
    if values.dtype.kind in "UT":
        values = values.astype(object)
    return pa.array(values, from_pandas=values.dtype.kind == "M")  # NaT -> NULL


def member(array: pa.Array | pa.ChunkedArray, values: ValueSet, column: str) -> Mask:
    """Return which entries of one column lie in a value set.

    Args:
        array: the column.
        values: the value set.
        column: the column's name, for error messages.

    Returns:
        A numpy bool array.

    Raises:
        TypeError: the column's type cannot be compared with the set's domain.
    """
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    nulls = _mask(pc.is_null(array))
    inside: Mask
    if values.domain == "any" or pa.types.is_null(array.type) or _unbounded(array.type):
        inside = ~nulls if values.intervals else np.zeros(len(array), dtype=bool)
    else:
        comparable, to_bound = _comparable(array, values, column)
        inside = _in_intervals(comparable, values.intervals, to_bound)
        if pa.types.is_floating(array.type):
            nan = _mask(pc.is_nan(array))
            top = any(interval.high is None for interval in values.intervals)
            inside = (inside & ~nan) | (nan & top)
    result: Mask = inside | nulls if values.null else inside & ~nulls
    return result


def _unbounded(kind: pa.DataType) -> bool:
    """Whether a column's values are not compared with a value set's bounds (rule 5)."""
    return bool(
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    )


def _mask(flags: pa.Array | pa.ChunkedArray) -> Mask:
    """Return Arrow booleans as a numpy mask, NULL read as False."""
    filled = pc.fill_null(flags, False)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)


def _in_intervals(
    array: pa.Array | pa.ChunkedArray, intervals: Sequence[Interval], to_bound: _Bound
) -> Mask:
    """Return which entries lie in the intervals (NULL entries: False)."""
    point_values = [i.low for i in intervals if i.low is not None and i.low == i.high]
    result: Any = None
    if point_values:
        value_set = pa.array([to_bound(v) for v in point_values], type=array.type)
        result = pc.is_in(array, value_set=value_set)
    for interval in intervals:
        if interval.low is not None and interval.low == interval.high:
            continue
        condition = _interval_condition(array, interval, to_bound)
        result = condition if result is None else pc.or_kleene(result, condition)
    if result is None:
        return np.zeros(len(array), dtype=bool)
    return _mask(result)


def _interval_condition(
    array: pa.Array | pa.ChunkedArray, interval: Interval, to_bound: _Bound
) -> Any:
    """Return the Arrow condition ``low <(=) array <(=) high`` of one interval."""
    conditions = []
    if interval.low is not None:
        low = pa.scalar(to_bound(interval.low), type=array.type)
        conditions.append((pc.greater_equal if interval.low_closed else pc.greater)(array, low))
    if interval.high is not None:
        high = pa.scalar(to_bound(interval.high), type=array.type)
        conditions.append((pc.less_equal if interval.high_closed else pc.less)(array, high))
    if not conditions:
        return pc.invert(pc.is_null(array))
    return conditions[0] if len(conditions) == 1 else pc.and_kleene(*conditions)


# ---------------------------------------------------------------------------------------------
# Bringing a column and a value set to one comparable type


class _Bound:
    """Converts a value set's bounds to the comparable column's values."""

    def __init__(self, domain: Domain, target: Domain, column: str) -> None:
        self._domain = domain
        self._target = target
        self._column = column

    def __call__(self, value: Scalar) -> Scalar:
        if self._target in ("num", "str"):
            return value
        if self._target == "bool":
            return int(value)
        converted = coerce(Constant(self._domain, value, repr(value)), self._target)
        if converted is None:
            raise TypeError(f"column {self._column!r} holds {self._target}s; {value!r} is not one")
        return converted


def _comparable(
    array: pa.Array | pa.ChunkedArray, values: ValueSet, column: str
) -> tuple[pa.Array | pa.ChunkedArray, _Bound]:
    """Cast a column so that it compares with the set's bounds; return it and a bound converter.

    Raises:
        TypeError: the column's type does not go with the set's domain.
    """
    kind, domain = array.type, values.domain
    types = pa.types
    if domain == "num" and (
        types.is_integer(kind) or types.is_floating(kind) or types.is_decimal(kind)
    ):
        floats = any(isinstance(b, float) for i in values.intervals for b in (i.low, i.high))
        whole = types.is_integer(kind) and not floats
        return array.cast(pa.int64() if whole else pa.float64()), _Bound(domain, "num", column)
    if domain == "str" and (types.is_string(kind) or types.is_large_string(kind)):
        return array.cast(pa.string()), _Bound(domain, "str", column)
    if domain == "bool" and types.is_boolean(kind):
        return array.cast(pa.int64()), _Bound(domain, "bool", column)
    if domain in ("str", "date") and types.is_date(kind):
        return array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64()), _Bound(
            domain, "date", column
        )
    if domain in ("str", "date", "timestamp") and types.is_date(kind):
        days = array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
        return pc.multiply(days, _MICROS_PER_DAY), _Bound(domain, "timestamp", column)
    if domain in ("str", "date", "timestamp") and types.is_timestamp(kind):
        micros = array.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
        return micros, _Bound(domain, "timestamp", column)
    raise TypeError(
        f"column {column!r} holds {kind} values; the primitive compares it with {domain} values"
    )
