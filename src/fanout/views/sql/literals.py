"""SQL literals as the box algebra's values: numbers, strings, booleans, dates, timestamps, NULL.

A literal (``5``, ``'abc'``, ``TRUE``, ``NULL``, ``DATE '2024-01-31'``, ``'2024-01-31'::DATE``,
``TIMESTAMP '...'``) becomes a :class:`Constant`; anything else is not read, and the caller
over-approximates the predicate. Rules:

1. Integers stay exact (64 bits); other numbers are floats; non-finite ones are not read.
2. A string compared with a date column is read as a date if written ``YYYY-MM-DD``;
   timestamps likewise.
3. A cast that would round (``2.5::INT``) is not read.
4. DuckDB casts a string literal to its column's type, which a view does not know: a string that
   would read as a number, a non-canonical date or a boolean is not read as text (an atom).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from fanout.views.sql.values import Domain, Scalar, date_value, timestamp_value


@dataclass(frozen=True)
class Constant:
    """A literal: its domain and value (``None`` is SQL NULL) and its SQL text for messages."""

    domain: Domain
    value: Scalar | None
    text: str = field(compare=False)


def constant(node: exp.Expr) -> Constant | None:
    """Return the literal ``node`` stands for, or None if it is not a literal this module reads.

    Reads numbers (with a leading minus), strings, TRUE/FALSE, NULL and casts of literals to
    numbers, text, DATE, TIMESTAMP and TIMESTAMPTZ (``DATE '2024-01-31'``,
    ``'2024-01-31'::DATE``, ``TIMESTAMPTZ '2024-01-31 12:00:00+02'``).
    """
    node = unparen(node)
    reader = _READERS.get(type(node))
    return None if reader is None else reader(node, node.sql(dialect="duckdb"))


def _literal(node: exp.Expr, text: str) -> Constant | None:
    """Read a number or string literal."""
    if not isinstance(node, exp.Literal):
        return None
    return Constant("str", node.this, text) if node.is_string else _number(node.this, text)


def _negative(node: exp.Expr, text: str) -> Constant | None:
    """Read a negated number (``-2.5``)."""
    inner = constant(node.this)
    if inner is None or inner.domain != "num" or not isinstance(inner.value, int | float):
        return None
    return Constant("num", -inner.value, text)


_INTEGER = re.compile(r"\d+")
_DECIMAL = re.compile(r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DATE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*")
_TIMESTAMP = re.compile(
    r"\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?\s*"
)
_CANONICAL_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_NUMERIC_START = re.compile(r"\s*[-+]?\.?\d")
_BOOLEAN_WORDS = frozenset({"true", "false", "t", "f", "yes", "no", "y", "n", "on", "off"})
_INT64 = (-(2**63), 2**63 - 1)
_TIMESTAMP_TYPES = (exp.DType.TIMESTAMP, exp.DType.TIMESTAMPNTZ, exp.DType.DATETIME)
_INSTANT_TYPES = (exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ)
#: A time of day followed by a zone offset (``+05``, ``-0330``, ``+05:30``, ``Z``).
_ZONED = re.compile(
    r"(.*\d{1,2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)"  # the time, as _TIMESTAMP reads it
    r"\s*([zZ]|[+-]\d{1,2}(?::?\d{2})?)\s*"  # the offset
)


def _number(literal: str, text: str) -> Constant | None:
    """Read a numeric literal; integers stay exact, others become floats."""
    if _INTEGER.fullmatch(literal):
        value = int(literal)
        return Constant("num", value, text) if _INT64[0] <= value <= _INT64[1] else None
    if _DECIMAL.fullmatch(literal):
        number = float(literal)
        return Constant("num", number, text) if math.isfinite(number) else None
    return None


def _cast(node: exp.Expr, text: str) -> Constant | None:
    """Read a cast of a literal to DATE, TIMESTAMP, text or a number."""
    inner = constant(node.this)
    if inner is None or inner.value is None:
        return None if inner is None else Constant("any", None, text)  # a cast of NULL is NULL
    target = node.args.get("to")
    for types, read in _CASTS:
        if isinstance(target, exp.DataType) and target.is_type(*types):
            return read(inner, text)
    return None


def _as(inner: Constant, domain: Domain, text: str) -> Constant | None:
    """Read a literal as a value of ``domain`` (a cast to DATE or TIMESTAMP)."""
    value = coerce(inner, domain)
    return None if value is None else Constant(domain, value, text)


def _as_instant(inner: Constant, text: str) -> Constant | None:
    """Read a cast to ``TIMESTAMPTZ``: an instant, in the ``timestamp`` domain (microseconds
    since the epoch, UTC, as the relay's and the publisher's timestamp columns hold them). A
    string may end with a zone offset (``+05:30``, ``Z``); without one it is UTC, the relay's
    time zone. A named zone (``America/Chicago``) is not read: DuckDB then decides at the relay.
    """
    if inner.domain != "str" or not isinstance(inner.value, str):
        return _as(inner, "timestamp", text)  # a DATE: midnight UTC
    zoned = _ZONED.fullmatch(inner.value)
    if zoned is None:
        return _as(inner, "timestamp", text)
    moment = _parse_moment(zoned.group(1), date_only=False)
    if moment is None:
        return None
    zone = zoned.group(2)
    offset = dt.timedelta(0)
    if zone not in ("z", "Z"):
        digits = zone[1:].replace(":", "")
        hours, minutes = (digits, "0") if len(digits) <= 2 else (digits[:-2], digits[-2:])
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes))
        offset = -offset if zone[0] == "-" else offset
    return Constant("timestamp", timestamp_value(moment - offset), text)


def _as_text(inner: Constant, text: str) -> Constant | None:
    """Read a cast to text: only strings."""
    return Constant("str", inner.value, text) if inner.domain == "str" else None


def _as_integer(inner: Constant, text: str) -> Constant | None:
    """Read a cast to an integer type: only integers, which it leaves unchanged."""
    whole = inner.domain == "num" and isinstance(inner.value, int)
    return Constant("num", inner.value, text) if whole else None  # 2.5::INT rounds: not read


def _as_real(inner: Constant, text: str) -> Constant | None:
    """Read a cast to a floating-point type."""
    if inner.domain != "num" or not isinstance(inner.value, int | float):
        return None
    return Constant("num", float(inner.value), text)


_READERS: dict[type[exp.Expr], Callable[[exp.Expr, str], Constant | None]] = {
    exp.Null: lambda node, text: Constant("any", None, text),
    exp.Boolean: lambda node, text: Constant("bool", bool(node.this), text),
    exp.Literal: _literal,
    exp.Neg: _negative,
    exp.Cast: _cast,
}
_CASTS: list[tuple[Sequence[exp.DType], Callable[[Constant, str], Constant | None]]] = [
    ([exp.DType.DATE], lambda inner, text: _as(inner, "date", text)),
    (_TIMESTAMP_TYPES, lambda inner, text: _as(inner, "timestamp", text)),
    (_INSTANT_TYPES, _as_instant),
    (list(exp.DataType.TEXT_TYPES), _as_text),
    (list(exp.DataType.INTEGER_TYPES), _as_integer),
    (list(exp.DataType.REAL_TYPES), _as_real),
]


def coerce(value: Constant, domain: Domain) -> Scalar | None:
    """Return a literal's value in ``domain``, or None if it has no exact value there.

    Strings become dates or timestamps when they are written the ISO way; dates become timestamps
    at midnight. Nothing else converts. A string that a number, date or boolean column would read
    as such (rule 4) has no exact value as a string.
    """
    if value.domain == domain:
        ambiguous = isinstance(value.value, str) and not plain_text(value.value)
        return None if ambiguous else value.value
    if value.domain == "str" and isinstance(value.value, str):
        return _string_as(value.value, domain)
    if value.domain == "date" and domain == "timestamp" and isinstance(value.value, int):
        return value.value * 86_400_000_000
    return None


def _string_as(text: str, domain: Domain) -> Scalar | None:
    """Read a string as a date or timestamp value; None if it is not one."""
    if domain not in ("date", "timestamp"):
        return None
    moment = _parse_moment(text, date_only=domain == "date")
    if moment is None:
        return None
    return date_value(moment.date()) if domain == "date" else timestamp_value(moment)


def plain_text(text: str) -> bool:
    """Return True if ``text`` orders the same whatever type the column it is compared with has.

    DuckDB casts a string literal to the column's type: ``i < '10'`` compares numbers, ``d <
    '2024-1-5'`` dates. A string starting like a number or date, or spelling a boolean, would
    then order differently from its text; a canonical ``YYYY-MM-DD`` date orders the same as
    text and as a date, so it is kept.
    """
    if _CANONICAL_DATE.fullmatch(text) and _parse_moment(text, date_only=True) is not None:
        return True
    return not _NUMERIC_START.match(text) and text.strip().lower() not in _BOOLEAN_WORDS


def _parse_moment(text: str, date_only: bool) -> dt.datetime | None:
    """Parse ``YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]``; None for anything else or invalid dates."""
    match = (_DATE if date_only else _TIMESTAMP).fullmatch(text)
    if match is None:
        return None
    groups = match.groups()
    year, month, day, hour, minute, second = (
        [int(part) if part else 0 for part in groups[:6]] + [0, 0, 0]
    )[:6]
    fraction = groups[6] if len(groups) > 6 and groups[6] else "0"
    try:
        return dt.datetime(year, month, day, hour, minute, second, int(fraction.ljust(6, "0")))
    except ValueError:
        return None  # e.g. 2023-02-30: DuckDB rejects it when it runs the query


def unparen(node: exp.Expr) -> exp.Expr:
    """Return ``node`` without the parentheses around it."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node
