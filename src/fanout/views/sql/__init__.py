"""SQL views: subscriptions to relational datasets, and the coverage algebra over them.

CA 3197003 [0070], [0094], [0158]-[0163] (Fig. 8; docs/concepts.md, "Views"): a subscriber
subscribes with a SELECT query; the relay decides whether the primitives it already holds upstream
cover it ([0161], step 830) and, if not, subscribes for the uncovered part.

- :class:`Sql` is the view on the wire: its SQL text, normalised. It decomposes into one
  :class:`SqlBox` primitive per table it reads (:meth:`Sql.primitives`).
- :class:`SqlBox` is a primitive: a table, the columns carried, and a union of boxes over the
  table's columns. It is what a relay subscribes for upstream and what the publisher filters by.
- :func:`covers` and :func:`residual` answer the coverage question exactly for everything the
  box algebra represents (``fanout.views.sql.boxes``) and never wrongly claim coverage.
- :func:`to_duckdb`, :func:`primitive_to_duckdb` and :func:`to_spark` compile views and
  primitives for the relay (DuckDB) and the publisher (Spark).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.sql.boxes import (
    Box,
    box_meets,
    box_within,
    boxes_comparable,
    simplify,
    subtract,
)
from fanout.views.sql.compile import primitive_query, primitive_to_duckdb, to_duckdb, to_spark
from fanout.views.sql.fields import Atom
from fanout.views.sql.query import Analysis, analyse, real_columns
from fanout.views.sql.values import ValueSet

if TYPE_CHECKING:
    from fanout.views.sql.match import Batch, Mask

__all__ = [
    "Sql",
    "SqlBox",
    "SqlView",
    "covers",
    "parse",
    "primitive_to_duckdb",
    "residual",
    "to_duckdb",
    "to_spark",
]


class SqlBox(ViewBase, tag="sqlbox", frozen=True):
    """A primitive over one table: its rows inside a union of boxes, with some of its columns.

    Attributes:
        table: the table's name (lower case).
        columns: the columns the holder receives, sorted, always including those the boxes
            constrain; None means all of them (``SELECT *``).
        boxes: the union of boxes; empty selects no row, one unconstrained box every row.

    Raises:
        InvalidView: the table name is empty (or, via :class:`ValueSet`, a bound is malformed).
    """

    table: str
    columns: tuple[str, ...] | None = None
    boxes: tuple[Box, ...] = (Box(),)

    def __post_init__(self) -> None:
        if not self.table:
            raise InvalidView("a SQL primitive needs a table name")
        boxes = tuple(sorted({box for box in self.boxes if not box.is_empty()}, key=_box_key))
        columns = self.columns
        if columns is not None:
            constrained = {column for box in boxes for column, _ in box.ranges}
            columns = tuple(sorted({column.lower() for column in columns} | constrained))
        for name, value in (("table", self.table.lower()), ("columns", columns), ("boxes", boxes)):
            if getattr(self, name) != value:
                msgspec.structs.force_setattr(self, name, value)

    def match(self, batch: Batch) -> Mask:
        """Return a numpy bool mask of the rows of ``batch`` inside this primitive.

        Args:
            batch: a ``pyarrow.Table``/``RecordBatch`` or a mapping of column name -> numpy array.

        Raises:
            KeyError: the batch lacks a constrained column.
            TypeError: a column's type cannot be compared with the primitive's bounds.
        """
        # matching runs on pyarrow, the relay's and the publisher's (their extras), not the
        # subscriber's, who only makes views
        from fanout.views.sql.match import match  # noqa: PLC0415

        return match(self.boxes, batch)

    def __str__(self) -> str:
        return primitive_query(self)


def _box_key(box: Box) -> bytes:
    """Order boxes by their encoding, so equal unions of boxes are stored alike."""
    return msgspec.json.encode(box)


class Sql(ViewBase, tag="sql", frozen=True):
    """A SQL view: one SELECT query over one or more tables (DuckDB dialect).

    The text is normalised on construction (and on decoding from the wire), so views that differ
    only in spacing, keyword case or comments are equal. ``str(view)`` is the normalised text.

    Raises:
        InvalidView: the query does not parse or uses something views do not support (see
            ``fanout.views.sql.query``); the message names the problem and where it is.
    """

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidView(f"a SQL view's text must be a string, not {type(self.text).__name__}")
        normal = _analysis(self.text).text
        if normal != self.text:
            msgspec.structs.force_setattr(self, "text", normal)

    def __str__(self) -> str:
        return self.text

    def primitives(self) -> tuple[SqlBox, ...]:
        """Return one primitive per table the query reads, sorted by table name."""
        return _primitives(self.text)

    @property
    def tables(self) -> tuple[str, ...]:
        """Return the names of the tables the query reads, sorted."""
        return tuple(need.table for need in _analysis(self.text).needs)

    @property
    def reads_clock(self) -> bool:
        """Return True if the query calls a function of the clock (``now()``,
        ``current_date``, ...): its rows may change as time passes, its tables unchanged."""
        return _analysis(self.text).clock

    @property
    def exact(self) -> bool:
        """Return True if the primitive selects exactly the query's rows.

        False when the relay must apply the WHERE clause itself: the query joins tables, uses
        predicates that cannot be boxed (LIKE, functions, ...), or LIMIT/OFFSET/DISTINCT ON.
        """
        return _analysis(self.text).exact


SqlView: TypeAlias = Sql | SqlBox
"""Every SQL view class: queries and their per-table primitives (both travel on the wire)."""


@functools.lru_cache(maxsize=4096)
def _analysis(text: str) -> Analysis:
    """Parse and analyse a view's text once; views are immutable, so the result is cached."""
    return analyse(text)


@functools.lru_cache(maxsize=4096)
def _primitives(text: str) -> tuple[SqlBox, ...]:
    """Build (once) the primitives of a view's text."""
    return tuple(SqlBox(n.table, n.columns, n.boxes) for n in _analysis(text).needs)


def parse(text: str) -> Sql:
    """Parse a SQL view.

    Args:
        text: one SELECT query, DuckDB dialect.

    Returns:
        The view, usable with :func:`covers` and :func:`residual`.

    Raises:
        InvalidView: the query is malformed or unsupported.
    """
    return Sql(text)


# ---------------------------------------------------------------------------------------------
# Coverage


def covers(have: Iterable[object], view: Sql | SqlBox) -> bool:
    """Return True if ``have`` holds every row and column ``view`` may need.

    Exact over the box algebra (continuous domains: see ``fanout.views.sql.boxes``); never True
    when some needed row might be missing. A held primitive holds its boxes. A held single-table
    view holds its rows, compared atom by atom for predicates that cannot be boxed (so it covers
    itself and narrower views), or nothing if a LIMIT or a bounding box blurs its rows; a held
    join holds, per table, at most its primitives.

    Args:
        have: views and primitives held upstream; kinds other than SQL are ignored.
        view: the SQL view or primitive to check.

    Returns:
        True if, for every table the view reads, the held rows of that table that carry all the
        columns the view needs jointly contain the rows the view needs.

    Raises:
        TypeError: ``view`` is not a SQL view or primitive.
    """
    have = list(have)
    if _held_verbatim(have, view):
        return True
    held = _held(have)
    for table, columns, boxes in _wanted(view):
        takers = _takers(held, table, columns)
        inside_one = all(any(box_within(box, taker) for taker in takers) for box in boxes)
        if not inside_one and subtract(boxes, takers):
            return False
    return True


def meets(a: SqlBox, b: SqlBox) -> bool:
    """Whether some row could be in both primitives: one table, and two of their boxes share a
    point (or cannot be compared: then True)."""
    if a.table != b.table:
        return False
    for first in a.boxes:
        for second in b.boxes:
            x, y = first.as_map(), second.as_map()
            if not boxes_comparable(x, y) or box_meets(x, y):
                return True
    return False


def residual(have: Iterable[object], view: Sql | SqlBox) -> list[SqlBox]:
    """Return the part of ``view`` that ``have`` does not cover, as primitives.

    ``have`` plus the result covers ``view``. The result is exact for boxable predicates: each
    table's residual is the view's boxes minus the union of the held boxes that carry the view's
    columns (atoms are then dropped, which can only widen it).

    Args:
        have: views and primitives held upstream; kinds other than SQL are ignored.
        view: the SQL view or primitive wanted.

    Returns:
        One primitive per table with an uncovered part (empty if ``view`` is covered).

    Raises:
        TypeError: ``view`` is not a SQL view or primitive.
    """
    have = list(have)
    if _held_verbatim(have, view):
        return []
    held = _held(have)
    result: list[SqlBox] = []
    for table, columns, boxes in _wanted(view):
        left = subtract(boxes, _takers(held, table, columns))
        if left:
            real = simplify([real_columns(box) for box in left])
            result.append(SqlBox(table, columns, tuple(Box.of(box) for box in real)))
    return result


Columns = tuple[str, ...] | None
CoverBox = Mapping[str | Atom, ValueSet]


def _held_verbatim(have: list[object], view: Sql | SqlBox) -> bool:
    """Return True if ``view`` itself is held (any view covers itself, whatever it reads)."""
    return any(type(item) is type(view) and item == view for item in have)


def _wanted(view: Sql | SqlBox) -> list[tuple[str, Columns, list[CoverBox]]]:
    """Return, per table, the columns and the boxes (with atoms) of the rows ``view`` needs."""
    if isinstance(view, Sql):
        needs = _analysis(view.text).needs
        return [(need.table, need.columns, list(need.cover)) for need in needs]
    if isinstance(view, SqlBox):
        return [(view.table, view.columns, [_cover_box(box) for box in view.boxes])]
    raise TypeError(f"expected a SQL view or primitive, got {type(view).__name__}")


def _held(have: Iterable[object]) -> dict[str, list[tuple[Columns, CoverBox]]]:
    """Group the boxes held by the SQL views and primitives in ``have`` by table."""
    held: dict[str, list[tuple[Columns, CoverBox]]] = {}
    for item in have:
        if isinstance(item, SqlBox):
            found = held.setdefault(item.table, [])
            found.extend((item.columns, _cover_box(box)) for box in item.boxes)
        elif isinstance(item, Sql):
            analysis = _analysis(item.text)
            if len(analysis.needs) == 1 and not analysis.faithful:
                continue  # its boxes hold more than its rows: count on none of them
            for need in analysis.needs:
                held.setdefault(need.table, []).extend((need.columns, box) for box in need.cover)
    return held


def _cover_box(box: Box) -> CoverBox:
    """Return a primitive's box as coverage compares it (its keys are columns, never atoms)."""
    cover: dict[str | Atom, ValueSet] = dict(box.ranges)
    return cover


def _takers(
    held: Mapping[str, list[tuple[Columns, CoverBox]]], table: str, columns: Columns
) -> list[CoverBox]:
    """Return the held boxes of ``table`` that carry all of ``columns``."""
    return [box for carried, box in held.get(table, []) if _carries(carried, columns)]


def _carries(held: Columns, needed: Columns) -> bool:
    """Return True if a holder of ``held`` columns (None: all) has all of ``needed``."""
    if held is None:
        return True
    return needed is not None and set(needed) <= set(held)
