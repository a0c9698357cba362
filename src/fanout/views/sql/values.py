"""Value sets: the values one column of a SQL view's box may take (``fanout.views.sql.boxes``).
Rules:

1. A :class:`ValueSet` is a union of intervals over one *domain* (numbers, strings, dates,
   timestamps, booleans) and a flag saying whether NULL is in it; SQL's three-valued logic lives
   in that flag.
2. Domains are *continuous* (a view does not know its table's schema): coverage is never wrongly
   True, maybe wrongly False on integer or date columns. Booleans are exactly {FALSE, TRUE}; no
   string is below ''.
3. Dates are days and timestamps microseconds since 1970-01-01 (Arrow's ``date32``,
   ``timestamp[us]``); strings compare by code point.
4. Value sets over different domains are *incomparable*: nothing is concluded from them.

An interval is a half-open pair of *cuts* (just below or above a value), compared as tuples.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from fanout.errors import InvalidView

Scalar = bool | int | float | str
Domain = Literal["any", "num", "str", "date", "timestamp", "bool"]
DOMAINS: tuple[Domain, ...] = ("any", "num", "str", "date", "timestamp", "bool")

EPOCH_DATE = dt.date(1970, 1, 1)
EPOCH_TIMESTAMP = dt.datetime(1970, 1, 1)
_MICROSECOND = dt.timedelta(microseconds=1)
_DAYS = ((dt.date.min - EPOCH_DATE).days, (dt.date.max - EPOCH_DATE).days)
_MICROS = (
    (dt.datetime.min - EPOCH_TIMESTAMP) // _MICROSECOND,
    (dt.datetime.max - EPOCH_TIMESTAMP) // _MICROSECOND,
)


class Interval(msgspec.Struct, frozen=True, array_like=True):
    """An interval of one domain's values; a ``None`` bound is unbounded on that side."""

    low: Scalar | None = None
    high: Scalar | None = None
    low_closed: bool = False
    high_closed: bool = False


class ValueSet(msgspec.Struct, frozen=True):
    """The values one column may take: intervals of one domain, and maybe NULL.

    Construction validates the values against the domain and puts the intervals in canonical form
    (sorted, disjoint, not touching), so equal sets compare and hash equal.

    Raises:
        InvalidView: a value does not belong to the domain (e.g. a string in a ``num`` set), a
            float is not finite, or a date or timestamp is out of range.
    """

    domain: Domain
    intervals: tuple[Interval, ...] = ()
    null: bool = False

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise InvalidView(f"unknown value domain {self.domain!r}; expected one of {DOMAINS}")
        for interval in self.intervals:
            _check_bound(self.domain, interval.low, interval.low_closed)
            _check_bound(self.domain, interval.high, interval.high_closed)
        spans = _within_universe(_normal(_spans(self.intervals)), self.domain)
        domain = self.domain if spans and spans != [_FULL_SPAN] else "any"
        intervals = tuple(_interval(span) for span in spans)
        if domain != self.domain:
            msgspec.structs.force_setattr(self, "domain", domain)
        if intervals != self.intervals:
            msgspec.structs.force_setattr(self, "intervals", intervals)

    def is_empty(self) -> bool:
        """Return True if no value, not even NULL, is in the set."""
        return not self.intervals and not self.null

    def is_everything(self) -> bool:
        """Return True if every value and NULL are in the set (the column is unconstrained)."""
        return self.null and self.intervals == _FULL_INTERVALS

    def without_null(self) -> ValueSet:
        """Return the same values without NULL."""
        return ValueSet(self.domain, self.intervals, False)


# ---------------------------------------------------------------------------------------------
# Domain values


def date_value(day: dt.date) -> int:
    """Return a date as the ``date`` domain stores it: days since 1970-01-01."""
    return (day - EPOCH_DATE).days


def timestamp_value(moment: dt.datetime) -> int:
    """Return a naive timestamp as the ``timestamp`` domain stores it: microseconds since epoch."""
    return (moment - EPOCH_TIMESTAMP) // _MICROSECOND


def python_value(domain: Domain, value: Scalar) -> Scalar | dt.date | dt.datetime:
    """Return a domain value as the Python object it stands for (``date``/``datetime`` for dates).

    Args:
        domain: the value set's domain.
        value: a value stored in that domain.

    Returns:
        The value itself, or a ``datetime.date`` / ``datetime.datetime`` for dates and timestamps.
    """
    if domain == "date":
        return EPOCH_DATE + dt.timedelta(days=int(value))
    if domain == "timestamp":
        return EPOCH_TIMESTAMP + int(value) * _MICROSECOND
    return value


def _check_bound(domain: Domain, value: Scalar | None, closed: bool) -> None:
    """Raise InvalidView if ``value`` is not a bound of ``domain``."""
    if value is None:
        if closed:
            raise InvalidView("an unbounded side of an interval cannot be closed")
        return
    if not _in_domain(domain, value):
        raise InvalidView(f"{value!r} is not a value of the {domain!r} domain")


def _in_domain(domain: Domain, value: Scalar) -> bool:
    """Return True if ``value`` can be stored in ``domain``."""
    if domain == "num":
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if domain == "str":
        return isinstance(value, str)
    if domain == "bool":
        return isinstance(value, bool)
    if domain == "date":
        return _is_int(value) and _DAYS[0] <= int(value) <= _DAYS[1]
    if domain == "timestamp":
        return _is_int(value) and _MICROS[0] <= int(value) <= _MICROS[1]
    return False  # the "any" domain holds only the full and the empty interval list


def _is_int(value: Scalar) -> bool:
    """Return True for an int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# Cuts and spans: intervals as half-open pairs of totally ordered cuts

Cut = tuple[int, Scalar | None, int]  # (0 bottom | 1 at a value | 2 top, value, 0 below | 1 above)
Span = tuple[Cut, Cut]

_BOTTOM: Cut = (0, None, 0)
_TOP: Cut = (2, None, 0)
_FULL_SPAN: Span = (_BOTTOM, _TOP)
_FULL_INTERVALS = (Interval(),)
# Domains with a smallest value or finitely many: the values there are, as spans.
_UNIVERSES: dict[Domain, list[Span]] = {
    "bool": [((1, False, 0), (1, False, 1)), ((1, True, 0), (1, True, 1))],
    "str": [((1, "", 0), _TOP)],  # no string sorts below ''
}


def _within_universe(spans: list[Span], domain: Domain) -> list[Span]:
    """Clip spans to the values the domain has, in canonical form.

    Booleans keep their two points (both together are the full line). Strings start at '': a
    span from '' on is written from the bottom, since nothing lies below '' (and '' itself would
    not read as a date, should the column hold dates).
    """
    universe = _UNIVERSES.get(domain)
    if universe is None:
        return spans
    clipped = _intersect_spans(spans, universe)
    if clipped == universe:
        return [_FULL_SPAN]
    if domain == "str":
        return [(_BOTTOM if low == universe[0][0] else low, high) for low, high in clipped]
    return clipped


def _spans(intervals: Iterable[Interval]) -> list[Span]:
    """Return intervals as spans (pairs of cuts)."""
    return [(_low_cut(interval), _high_cut(interval)) for interval in intervals]


def _low_cut(interval: Interval) -> Cut:
    """Return the cut where an interval starts."""
    if interval.low is None:
        return _BOTTOM
    return (1, interval.low, 0 if interval.low_closed else 1)


def _high_cut(interval: Interval) -> Cut:
    """Return the cut where an interval ends."""
    if interval.high is None:
        return _TOP
    return (1, interval.high, 1 if interval.high_closed else 0)


def _interval(span: Span) -> Interval:
    """Return a span as an interval."""
    low, high = span
    return Interval(
        low=low[1],
        high=high[1],
        low_closed=low[0] == 1 and low[2] == 0,
        high_closed=high[0] == 1 and high[2] == 1,
    )


def _normal(spans: Iterable[Span]) -> list[Span]:
    """Sort spans, drop empty ones and merge those that overlap or touch."""
    merged: list[Span] = []
    for low, high in sorted(span for span in spans if span[0] < span[1]):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _intersect_spans(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """Intersect two normal span lists (two-pointer sweep)."""
    result: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if low < high:
            result.append((low, high))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return result


def _complement_spans(spans: Sequence[Span], domain: Domain) -> list[Span]:
    """Return the domain's values that are not in ``spans``."""
    universe = _UNIVERSES.get(domain)
    if universe is not None:
        return _intersect_spans(universe, _complement_spans(spans, "any"))
    gaps: list[Span] = []
    cursor = _BOTTOM
    for low, high in spans:
        if cursor < low:
            gaps.append((cursor, low))
        cursor = high
    if cursor < _TOP:
        gaps.append((cursor, _TOP))
    return gaps


# ---------------------------------------------------------------------------------------------
# Value sets

EVERYTHING = ValueSet("any", _FULL_INTERVALS, null=True)
NOTHING = ValueSet("any", (), null=False)
NOT_NULL = ValueSet("any", _FULL_INTERVALS, null=False)
ONLY_NULL = ValueSet("any", (), null=True)


def points(domain: Domain, values: Iterable[Scalar]) -> ValueSet:
    """Return the set holding exactly ``values`` (an IN-list), without NULL."""
    return ValueSet(domain, tuple(Interval(v, v, True, True) for v in values))


def compare(op: str, domain: Domain, value: Scalar) -> ValueSet:
    """Return the values ``x`` for which ``x <op> value`` is TRUE (never NULL).

    Args:
        op: one of ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``.
        domain: the domain of ``value``.
        value: the literal the column is compared with.

    Returns:
        The value set where the comparison holds.
    """
    if op == "=":
        return points(domain, [value])
    if op == "<>":
        return complement(points(domain, [value])).without_null()
    bounds = {
        "<": Interval(None, value, False, False),
        "<=": Interval(None, value, False, True),
        ">": Interval(value, None, False, False),
        ">=": Interval(value, None, True, False),
    }
    return ValueSet(domain, (bounds[op],))


def comparable(a: ValueSet, b: ValueSet) -> bool:
    """Return True if the two sets are over the same domain (or either is domain-free)."""
    return a.domain == b.domain or "any" in (a.domain, b.domain)


def _common_domain(a: ValueSet, b: ValueSet) -> Domain:
    """Return the domain two comparable sets share, or raise ValueError."""
    if not comparable(a, b):
        raise ValueError(f"cannot combine {a.domain!r} and {b.domain!r} value sets")
    return b.domain if a.domain == "any" else a.domain


def intersect(a: ValueSet, b: ValueSet) -> ValueSet:
    """Return the values in both sets.

    Raises:
        ValueError: the sets are over different domains (callers check :func:`comparable`).
    """
    domain = _common_domain(a, b)
    spans = _intersect_spans(_spans(a.intervals), _spans(b.intervals))
    return ValueSet(domain, tuple(_interval(s) for s in spans), a.null and b.null)


def union(a: ValueSet, b: ValueSet) -> ValueSet:
    """Return the values in either set.

    Raises:
        ValueError: the sets are over different domains.
    """
    domain = _common_domain(a, b)
    return ValueSet(domain, a.intervals + b.intervals, a.null or b.null)


def complement(a: ValueSet) -> ValueSet:
    """Return the values (NULL included) that are not in ``a``."""
    spans = _complement_spans(_spans(a.intervals), a.domain)
    return ValueSet(a.domain, tuple(_interval(s) for s in spans), not a.null)


def meets(a: ValueSet, b: ValueSet) -> bool:
    """Return True if the sets share a value or NULL (they must be comparable)."""
    if a.null and b.null:
        return True
    a_spans, b_spans = _spans(a.intervals), _spans(b.intervals)
    i = j = 0
    while i < len(a_spans) and j < len(b_spans):
        if max(a_spans[i][0], b_spans[j][0]) < min(a_spans[i][1], b_spans[j][1]):
            return True
        if a_spans[i][1] < b_spans[j][1]:
            i += 1
        else:
            j += 1
    return False


def within(a: ValueSet, b: ValueSet) -> bool:
    """Return True if every value of ``a`` is in ``b``; False too if they are incomparable."""
    if not comparable(a, b) or (a.null and not b.null):
        return False
    outside = _complement_spans(_spans(b.intervals), _common_domain(a, b))
    return not _intersect_spans(_spans(a.intervals), outside)
