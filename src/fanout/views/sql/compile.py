"""Compiling SQL views and primitives for the two engines that run them.

The publisher (Spark) filters its tables by each relay's primitives;
the relay keeps its copy of the tables in DuckDB and runs its subscribers' queries there
(CA 3197003 [0094] and [0163], step 890).

- :func:`to_duckdb`: the view's query as the relay runs it (identifiers quoted, same semantics).
- :func:`primitive_to_duckdb`: a primitive as a DuckDB WHERE predicate.
- :func:`to_spark`: a primitive as a PySpark Column (the publisher's filter). PySpark is
  imported inside the function, so the views package does not need Spark.

A primitive's predicate is ``OR`` over its boxes of ``AND`` over its columns of
``column IN (points) OR low <(=) column AND column <(=) high ... [OR column IS NULL]``.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import sqlglot
from sqlglot import exp

from fanout.views.sql.boxes import Box
from fanout.views.sql.syntax import DIALECT
from fanout.views.sql.values import Domain, Interval, Scalar, ValueSet, python_value

if TYPE_CHECKING:
    from pyspark.sql import Column

    from fanout.views.sql import Sql, SqlBox

T = TypeVar("T")


def to_duckdb(view: Sql) -> str:
    """Return the view's query for DuckDB, every identifier quoted.

    Args:
        view: a SQL view.

    Returns:
        SQL text with the same semantics as the view's own text.
    """
    return _quoted(view.text)


@functools.lru_cache(maxsize=4096)
def _quoted(text: str) -> str:
    """Re-render a view's text with every identifier quoted (cached per text)."""
    return sqlglot.parse_one(text, read=DIALECT).sql(dialect=DIALECT, identify=True)


def primitive_to_duckdb(prim: SqlBox) -> str:
    """Return a primitive as a DuckDB WHERE predicate over its table's columns.

    Args:
        prim: a SQL primitive.

    Returns:
        The predicate text (``FALSE`` for an empty primitive, ``TRUE`` for a whole table).
    """
    return boxes_predicate(prim.boxes).sql(dialect=DIALECT, identify=True)


def primitive_query(prim: SqlBox) -> str:
    """Return the query that selects a primitive's rows and columns, for DuckDB."""
    columns: list[exp.Expr] = [exp.Star()]
    if prim.columns is not None:
        columns = [exp.column(column, quoted=True) for column in prim.columns]
        columns = columns or [exp.Literal.number(1)]  # no columns: the rows alone
    query = exp.select(*columns).from_(exp.table_(prim.table, quoted=True))
    return query.where(boxes_predicate(prim.boxes)).sql(dialect=DIALECT, identify=True)


def boxes_predicate(boxes: Sequence[Box]) -> exp.Expr:
    """Return a union of boxes as a sqlglot predicate."""
    return _combine(
        [_box_predicate(box) for box in boxes],
        lambda parts: exp.or_(*parts),
        exp.false(),
    )


def _box_predicate(box: Box) -> exp.Expr:
    """Return one box as the AND of its columns' predicates (TRUE for none)."""
    return _combine(
        [_range_predicate(column, values) for column, values in box.ranges],
        lambda parts: exp.and_(*parts),
        exp.true(),
    )


def _range_predicate(column: str, values: ValueSet) -> exp.Expr:
    """Return one column's value set as a predicate: IN-list, ranges, IS NULL."""
    reference = exp.column(column, quoted=True)
    literal = functools.partial(_literal, values.domain)
    point_values, ranges = _split(values.intervals)
    parts: list[exp.Expr] = []
    if point_values:
        items = [literal(v) for v in point_values]
        parts.append(reference.eq(items[0]) if len(items) == 1 else reference.isin(*items))
    for interval in ranges:
        bounds: list[exp.Expr] = []
        if interval.low is not None:
            above = exp.GTE if interval.low_closed else exp.GT
            bounds.append(above(this=reference.copy(), expression=literal(interval.low)))
        if interval.high is not None:
            below = exp.LTE if interval.high_closed else exp.LT
            bounds.append(below(this=reference.copy(), expression=literal(interval.high)))
        parts.append(exp.and_(*bounds) if bounds else reference.copy().is_(exp.null()).not_())
    if values.null:
        parts.append(reference.copy().is_(exp.null()))
    return _combine(parts, lambda found: exp.or_(*found), exp.false())


def _literal(domain: Domain, value: Scalar) -> exp.Expr:
    """Return a domain value as a DuckDB literal."""
    native = python_value(domain, value)
    if isinstance(native, bool):
        return exp.Boolean(this=native)
    if isinstance(native, int | float):
        return exp.Literal.number(repr(native))
    if isinstance(native, dt.datetime):
        return exp.cast(exp.Literal.string(native.isoformat(sep=" ")), "TIMESTAMP")
    if isinstance(native, dt.date):
        return exp.cast(exp.Literal.string(native.isoformat()), "DATE")
    return exp.Literal.string(native)


def _split(intervals: Sequence[Interval]) -> tuple[list[Scalar], list[Interval]]:
    """Split intervals into point values (an IN-list) and proper ranges."""
    point_values: list[Scalar] = []
    ranges: list[Interval] = []
    for interval in intervals:
        if interval.low is not None and interval.low == interval.high:
            point_values.append(interval.low)
        elif interval.low is None and interval.high == "" and interval.high_closed:
            point_values.append("")  # nothing sorts below '': this is the point ''.
        else:
            ranges.append(interval)
    return point_values, ranges


def _combine(parts: list[T], join: Callable[[list[T]], T], empty: T) -> T:
    """Join predicates with ``join``; ``empty`` when there are none, the one when one."""
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else join(parts)


# ---------------------------------------------------------------------------------------------
# Spark


def to_spark(prim: SqlBox, unbounded: Collection[str] = ()) -> Column:
    """Return a primitive as a PySpark Column: the publisher's filter for it.

    Args:
        prim: a SQL primitive.
        unbounded: columns (lower case) not compared with bounds: bytes columns, whose value
            sets hold every non-NULL value (``views.sql.match``, rule 5).

    Returns:
        A boolean Column over the primitive's table (``lit(False)`` when it is empty).
    """
    # Imported here so that importing the views (relays, clients) does not need Spark.
    import pyspark.sql.functions as sf  # noqa: PLC0415

    return _spark_any([_spark_box(box, sf, unbounded) for box in prim.boxes], sf)


def _spark_box(box: Box, sf: Any, unbounded: Collection[str]) -> Column:
    """Return one box as a Spark Column (AND of its columns' conditions)."""
    return _spark_all(
        [_spark_range(column, values, sf, column in unbounded) for column, values in box.ranges],
        sf,
    )


def _spark_range(column: str, values: ValueSet, sf: Any, unbounded: bool = False) -> Column:
    """Return one column's value set as a Spark Column."""
    reference = sf.col("`" + column.replace("`", "``") + "`")
    if unbounded:
        parts = [reference.isNotNull()] if values.intervals else []
        return _spark_any([*parts, *([reference.isNull()] if values.null else [])], sf)
    literal = functools.partial(_spark_literal, values.domain, sf=sf)
    point_values, ranges = _split(values.intervals)
    parts = []
    if point_values:
        parts.append(reference.isin([literal(v) for v in point_values]))
    for interval in ranges:
        bounds = []
        if interval.low is not None:
            low = literal(interval.low)
            bounds.append(reference >= low if interval.low_closed else reference > low)
        if interval.high is not None:
            high = literal(interval.high)
            bounds.append(reference <= high if interval.high_closed else reference < high)
        parts.append(_spark_all(bounds, sf) if bounds else reference.isNotNull())
    if values.null:
        parts.append(reference.isNull())
    return _spark_any(parts, sf)


def _spark_literal(domain: Domain, value: Scalar, sf: Any) -> Column:
    """Return a domain value as a Spark literal.

    Timestamps are naive: they are written as text and cast to ``TIMESTAMP_NTZ``, so that no
    time zone (the Python process's or the Spark session's) shifts them on the way.
    """
    native = python_value(domain, value)
    if isinstance(native, dt.datetime):
        result: Column = sf.lit(native.isoformat(sep=" ")).cast("timestamp_ntz")
        return result
    literal: Column = sf.lit(native)
    return literal


def _spark_any(parts: list[Column], sf: Any) -> Column:
    """Return the OR of Columns (FALSE for none)."""
    result: Column = functools.reduce(operator.or_, parts) if parts else sf.lit(False)
    return result


def _spark_all(parts: list[Column], sf: Any) -> Column:
    """Return the AND of Columns (TRUE for none)."""
    result: Column = functools.reduce(operator.and_, parts) if parts else sf.lit(True)
    return result
