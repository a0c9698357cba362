"""Audit an ``every`` subscriber's updates against the publisher's log: every change, in order,
exactly once (docs/delivery.md, "Checking it"; US 7,487,246, "Gapless delivery and durable
subscriptions in a content-based publish/subscribe system").

The log is the only durable copy of the stream; :func:`audit` replays a subscriber's received
updates against it and counts what broke the promise. For each update, the logged change of its
seq decides what the update must hold: rows that changed and are inside the view are *entered*
(if the subscriber did not hold them) or *updated*; held rows that changed to outside it, or
were deleted, *left*; nothing else. A full push (the first, or the one after an announced
``resync``) starts the replay again from its rows. What a view selects is decided here, not by
the relay's query engine that the audit checks: ``fanout.views.members``, or for SQL views the
view's text run in a DuckDB database of its own over each changed row alone.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fanout.client.subscriber import Update
from fanout.publisher.log.base import BatchLog
from fanout.views.members import Selecting, members
from fanout.views.sql import Sql
from fanout.wire.columns import from_values, to_python


@dataclass
class Audit:
    """What replaying one subscriber's updates against the log found.

    Attributes:
        delivered: updates received (pushes and no-updates).
        first, last: the first and last seq received.
        lost: seqs missing between two updates with no full push between them.
        duplicated: updates of a seq already received.
        reordered: updates of a seq lower than one received before (not a duplicate).
        restarts: full pushes after the first (each follows an announced resync).
        mismatched: updates whose rows differ from what the logged change makes of the view.
        problems: the first few discrepancies, described.
        held: the keys the subscriber holds after the last update, by the replay.
        rows_at: the rows it held right after each seq asked for (``audit``'s ``at``).
    """

    delivered: int = 0
    first: int = -1
    last: int = -1
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    restarts: int = 0
    mismatched: int = 0
    problems: list[str] = field(default_factory=list)
    held: set[Any] = field(default_factory=set)
    rows_at: dict[int, Rows] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing lost, duplicated, reordered or wrong."""
        return not (self.lost or self.duplicated or self.reordered or self.mismatched)

    def note(self, problem: str) -> None:
        """Remember a discrepancy (the first ten)."""
        if len(self.problems) < 10:
            self.problems.append(problem)


def audit(
    updates: Sequence[Update],
    view: Selecting | Sql,
    *,
    key: str,
    index: Sequence[str],
    log: BatchLog,
    dataset: str,
    at: Collection[int] = (),
) -> Audit:
    """Replay ``updates`` (in arrival order) of a view of ``dataset`` against ``log``.

    Args:
        updates: what the subscriber received, in order.
        view: its view (a region, topic filter, object path, or a SQL view of one table that
            selects rows one by one, as mode ``every`` requires).
        key: the dataset's key column; index: its index columns (coordinates, topic, path).
        log: the publisher's log.
        dataset: the dataset's name.
        at: seqs after which to keep a copy of the rows held (``Audit.rows_at``): what a
            ``latest`` view of the same view at that seq must hold.

    Returns:
        What the replay found.

    Raises:
        ValueError: a SQL view made more than one row of one row (it does not select rows one
            by one).
    """
    report = Audit(delivered=len(updates))
    if not updates:
        return report
    seqs = [u.seq for u in updates]
    report.first, report.last = seqs[0], max(seqs)
    _count_order(updates, report)
    changes = {e.seq: e.rows for e in log.read(dataset, updates[0].epoch, min(seqs), max(seqs))}
    select = (
        _sql_selector(view, key, dataset)
        if isinstance(view, Sql)
        else _member_selector(view, key, index)
    )
    held: dict[Any, dict[str, Any]] = {}
    seen: set[int] = set()
    for update in updates:
        if update.seq in seen:
            continue
        seen.add(update.seq)
        rows = changes.get(update.seq)
        if rows is None:
            report.mismatched += 1
            report.note(f"seq {update.seq}: not in the publisher's log")
            continue
        selected = select(_live(rows))
        problem = _replay(update, rows.column(key).to_pylist(), selected, key, held)
        if problem is not None:
            report.mismatched += 1
            report.note(f"seq {update.seq}: {problem}")
        if update.seq in at:
            report.rows_at[update.seq] = {k: dict(row) for k, row in held.items()}
    report.held = set(held)
    return report


Rows = dict[Any, dict[str, Any]]
"""Rows by key, each a column -> value mapping."""


def latest_differences(held: Rows, expected: Rows) -> list[str]:
    """How a ``latest`` view's rows ``held`` at a seq differ from ``expected``, the rows the
    view holds at that seq by the log (an audited ``every`` view's ``Audit.rows_at``): keys
    missing, keys extra, and rows whose values differ (the first five of each)."""
    missing, extra = sorted(set(expected) - set(held)), sorted(set(held) - set(expected))
    wrong = sorted(k for k in set(held) & set(expected) if not _same(held[k], expected[k]))
    found = [("missing", missing), ("extra", extra), ("different", wrong)]
    return [f"{what} {keys[:5]} ({len(keys)})" for what, keys in found if keys]


def http_update(event: Mapping[str, Any]) -> Update:
    """An HTTP stream's ``push`` or ``no_update`` event (docs/http.md, its JSON read) as the
    :class:`Update` the subscriber library makes of a push, so :func:`audit` replays HTTP
    streams too. Rows go column by column (NULL is ``None``); ``received_at`` is 0.

    Raises:
        KeyError: the event has no ``epoch``, ``seq`` or ``tick`` (not a push or no-update).
    """

    def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        names = list(rows[0]) if rows else []
        return {name: from_values([row[name] for row in rows]) for name in names}

    return Update(
        sub=1,
        epoch=event["epoch"],
        seq=event["seq"],
        tick=event["tick"],
        full=bool(event.get("full", False)),
        entered=columns(event.get("entered", [])),
        updated=columns(event.get("updated", [])),
        left=from_values(list(event.get("left", []))),
        tick_time=float(event.get("tick_time") or 0.0),
        received_at=0.0,
    )


def _live(rows: pa.Table) -> pa.Table:
    """A logged change's upserted rows (deleted ones and internal columns dropped)."""
    if "_deleted" in rows.column_names:
        rows = rows.filter(pc.invert(rows.column("_deleted").fill_null(False)))
    return rows.select([name for name in rows.column_names if not name.startswith("_")])


def _member_selector(view: Selecting, key: str, index: Sequence[str]) -> Callable[[pa.Table], Rows]:
    """What a region, topic filter or object path selects of a change's live rows, by key."""

    def select(live: pa.Table) -> Rows:
        if not live.num_rows:
            return {}
        # every column: an object path's f= comparisons read columns other than the index
        columns = {name: live.column(name).to_pylist() for name in live.column_names}
        inside = live.filter(pa.array(members(view, columns, tuple(index))))
        return {row[key]: row for row in inside.to_pylist()}

    return select


def _sql_selector(view: Sql, key: str, dataset: str) -> Callable[[pa.Table], Rows]:
    """What a SQL view selects of a change's live rows, as its subscriber gets them: the
    query's row for each row it selects, keyed by that row's key (the relay sends the key
    even when the query does not select it).

    The view's text runs in a DuckDB database of its own on each row alone, the table named
    as the dataset holding just that row: one query per row, an oracle as plain as can be.
    """
    import duckdb  # noqa: PLC0415 - only SQL views need DuckDB: other audits stay light

    database = duckdb.connect()

    def select(live: pa.Table) -> Rows:
        selected: Rows = {}
        for number, row_key in enumerate(live.column(key).to_pylist()):
            database.register(dataset, live.slice(number, 1))
            try:
                result = database.sql(view.text)
                names, found = result.columns, result.fetchall()
            finally:
                database.unregister(dataset)
            if len(found) > 1:
                raise ValueError(f"{view} made {len(found)} rows of the row of key {row_key!r}")
            if found:
                selected[row_key] = {key: row_key, **dict(zip(names, found[0], strict=True))}
        return selected

    return select


def _count_order(updates: Sequence[Update], report: Audit) -> None:
    seen: set[int] = set()
    previous = None
    for number, update in enumerate(updates):
        if update.full and number:
            report.restarts += 1
        if update.seq in seen:
            report.duplicated += 1
            continue
        if previous is not None and update.seq < previous:
            report.reordered += 1
        elif previous is not None and not update.full and update.seq > previous + 1:
            report.lost += update.seq - previous - 1
            report.note(f"seqs {previous + 1}..{update.seq - 1} never arrived")
        seen.add(update.seq)
        previous = update.seq if previous is None else max(previous, update.seq)


def _replay(
    update: Update,
    changed: list[Any],
    selected: Rows,
    key: str,
    held: Rows,
) -> str | None:
    """Check one update against its seq's logged change (``changed``: the keys it upserted or
    deleted; ``selected``: the rows of it the view holds) and apply it to ``held``."""
    entered, updated = _rows(update.entered, key), _rows(update.updated, key)
    left = set(update.left.tolist())
    if update.full:
        held.clear()
        held.update(entered)
        wrong = [k for k, row in entered.items() if k in selected and not _same(row, selected[k])]
        return f"full push rows {wrong[:5]} differ from the log" if wrong else None
    inside = set(selected)
    expect_entered, expect_updated = inside - set(held), inside & set(held)
    expect_left = {k for k in changed if k in held and k not in inside}
    if (set(entered), set(updated), left) != (expect_entered, expect_updated, expect_left):
        return (
            f"entered {sorted(set(entered) ^ expect_entered)[:5]}, updated"
            f" {sorted(set(updated) ^ expect_updated)[:5]}, left"
            f" {sorted(left ^ expect_left)[:5]} differ from the log"
        )
    wrong = [k for k, row in {**entered, **updated}.items() if not _same(row, selected[k])]
    for k in left:
        del held[k]
    held.update(entered)
    held.update(updated)
    return f"rows {wrong[:5]} differ from the log" if wrong else None


def _rows(columns: dict[str, Any], key: str) -> dict[Any, dict[str, Any]]:
    if not columns:
        return {}
    names = list(columns)
    lists = [to_python(columns[n]) for n in names]
    return {
        row[key]: row
        for row in (dict(zip(names, v, strict=True)) for v in zip(*lists, strict=True))
    }


def _same(row: dict[str, Any], logged: dict[str, Any]) -> bool:
    """The received row's columns hold the logged values (a projection sends fewer)."""
    return all(_equal(logged.get(c, value), value) for c, value in row.items())


def _equal(a: Any, b: Any) -> bool:
    """Equal values: NULL (``None``) only to NULL, NaN (a number) only to NaN."""
    if a is None or b is None:
        return a is None and b is None
    return bool(a == b) or (_nan(a) and _nan(b))


def _canonical(value: Any) -> str:
    """A value spelled so that equal values are equal text: NaN is NaN, an instant is its UTC
    time whatever zone object it carries."""
    if _nan(value):
        return "NaN"
    if isinstance(value, datetime.datetime) and value.utcoffset() is not None:
        return "instant " + value.astimezone(datetime.UTC).isoformat()
    return repr(value)


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def duckdb_answer(
    text: str, tables: Mapping[str, Mapping[str, Any]]
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """DuckDB's answer to a SQL view's ``text`` over ``tables``: an oracle for any view (joins
    included) that shares nothing with the relay but DuckDB itself.

    Args:
        text: the view's SQL, as its subscriber wrote it.
        tables: table name -> column -> values (numpy arrays, masked where NULL, or lists
            with ``None``; Arrow arrays).

    Returns:
        The result's column names and its rows (NULL as ``None``), in DuckDB's order.
    """
    import duckdb  # noqa: PLC0415 - only SQL audits need DuckDB: other audits stay light

    from fanout.wire.arrow import to_arrow  # noqa: PLC0415 - pyarrow-only, like duckdb

    database = duckdb.connect()
    database.execute("SET TimeZone = 'UTC'")
    try:
        for name, columns in tables.items():
            arrow = pa.table(
                {
                    column: values
                    if isinstance(values, pa.Array | pa.ChunkedArray)
                    else to_arrow(from_values(values))
                    for column, values in columns.items()
                }
            )
            database.register(name, arrow)
        result = database.sql(text)
        return list(result.columns), result.fetchall()
    finally:
        database.close()


def same_rows(
    got: Iterable[Mapping[str, Any]], names: Sequence[str], want: Sequence[tuple[Any, ...]]
) -> bool:
    """Whether the rows a subscriber holds (``got``, projected on ``names``) are ``want`` as a
    multiset: NULL equal only to NULL, NaN only to NaN."""

    def canonical(row: Sequence[Any]) -> tuple[str, ...]:
        return tuple(_canonical(value) for value in row)

    mine = sorted(canonical([row[name] for name in names]) for row in got)
    return mine == sorted(canonical(row) for row in want)
