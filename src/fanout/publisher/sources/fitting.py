"""Whether a value fits a column type, and the form the publisher's sources store it in.

One set of rules for every source that checks values in Python (the producer API's ingest log,
the ``postgres`` source), so that a value refused by one is refused by the others; the ``files``
source applies the same rules to JSON and CSV text inside Spark (``sources.textfit``). Integers
fit within their bits (booleans are not integers); a finite float beyond its type's range does
not fit; a decimal is never rounded; a timestamp needs a time zone; ``None`` (NULL) fits every
column, whether the column may hold it being the caller's to say. Each type's rules and stored
form: docs/configuration.md, the table of column types.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import math
from collections.abc import Callable
from typing import Any

from fanout.publisher.datasets import ColumnType, decimal_of

FLOAT32_MAX = 3.4028234663852886e38
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_SHOWN = 40


class Unfit(ValueError):
    """A value does not fit its column's type."""


def stored(column: str, kind: ColumnType, value: Any) -> Any:
    """``value`` in the form a column of type ``kind`` stores it (``None`` stays ``None``).

    Args:
        column: the column's name, for the message.
        kind: its declared type.
        value: the value given.

    Returns:
        The value as stored: see the module's rules.

    Raises:
        Unfit: the value does not fit; its message names the column, its type and the value.
    """
    if value is None:
        return None
    kept = _check_of(kind)(value)
    if kept is _BAD:
        raise unfit(column, kind, value)
    return kept


@functools.cache
def _check_of(kind: ColumnType) -> Callable[[Any], Any]:
    """The check of a column type, made once (a source checks every value of every change)."""
    found = decimal_of(kind)
    return _CHECKS[kind] if found is None else _decimal(*found)


def unfit(column: str, kind: ColumnType, value: Any) -> Unfit:
    """The error of a value that does not fit column ``column`` of type ``kind``."""
    shown = repr(value) if len(repr(value)) <= _SHOWN else repr(value)[:_SHOWN] + "..."
    why = (
        " (a timestamp needs a time zone)"
        if kind == "timestamp" and isinstance(value, datetime.datetime)
        else ""
    )
    return Unfit(f"column {column!r} is {kind}, not {shown}{why}")


_BAD = object()


def _integer(bits: int) -> Callable[[Any], Any]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def check(value: Any) -> Any:
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        return value if ok else _BAD

    return check


def _real(limit: float) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return _BAD
        try:
            number = float(value)
        except OverflowError:  # an integer beyond every float
            return _BAD
        # Beyond float32's range a value would turn into infinity; infinities given are kept.
        return _BAD if math.isfinite(number) and abs(number) > limit else number

    return check


def _aware(value: Any) -> bool:
    """A ``datetime`` with a time zone: a naive one names no instant, so it does not fit."""
    return isinstance(value, datetime.datetime) and value.utcoffset() is not None


def _micros(value: datetime.datetime) -> int:
    """Microseconds since the epoch (UTC): how a timestamp is stored."""
    return (value - _EPOCH) // datetime.timedelta(microseconds=1)


def _days(value: datetime.date) -> int:
    """Days since the epoch: how a date is stored."""
    return (value - _EPOCH.date()).days


def _binary(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else _BAD


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "long": _integer(64),
    "int": _integer(32),
    "double": _real(math.inf),
    "float": _real(FLOAT32_MAX),
    "string": lambda value: value if isinstance(value, str) else _BAD,
    "boolean": lambda value: value if isinstance(value, bool) else _BAD,
    "timestamp": lambda value: _micros(value) if _aware(value) else _BAD,
    "date": lambda value: _days(value) if type(value) is datetime.date else _BAD,
    "bytes": _binary,
}


def _decimal(precision: int, scale: int) -> Callable[[Any], Any]:
    """A decimal(p,s) check: a ``Decimal``, an integer or decimal text whose digits fit
    exactly; stored as text with ``scale`` decimals."""
    step = decimal.Decimal(1).scaleb(-scale)
    # Quantizing in a context of the column's precision that traps rounding raises instead of
    # rounding a decimal away, and instead of keeping more digits than the column has.
    exact = decimal.Context(prec=precision, traps=[decimal.InvalidOperation, decimal.Inexact])

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | str | decimal.Decimal):
            return _BAD
        try:
            number = decimal.Decimal(value)
            if not number.is_finite():
                return _BAD
            return format(number.quantize(step, context=exact), "f")  # never 1E-7: digits
        except (decimal.InvalidOperation, decimal.Inexact):
            return _BAD

    return check
