"""Audit an ``every`` subscriber's updates against the publisher's log (seed 004's promise:
every change, in order, exactly once).

The log is the only durable copy of the stream; :func:`audit` replays a subscriber's received
updates against it and counts what broke the promise::

    with SqliteLog("state/log.db") as log:
        report = audit(updates, box, key="id", index=("x", "y"), log=log, dataset="agents")
    assert report.clean

For each update, the logged change of its seq decides what the update must hold: rows that
changed and are inside the view are *entered* (if the subscriber did not hold them) or *updated*;
held rows that changed to outside it, or were deleted, *left*; nothing else. A full push (the
first, or the one after an announced ``resync``) starts the replay again from its rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from fanout.client.subscriber import Update
from fanout.publisher.log import BatchLog, LogEntry
from fanout.relay.tables import TableStore
from fanout.views.members import Selecting, members
from fanout.views.sql import Sql
from fanout.wire.messages import DatasetInfo


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
) -> Audit:
    """Replay ``updates`` (in arrival order) of a view of ``dataset`` against ``log``.

    Args:
        updates: what the subscriber received, in order.
        view: its view (a region, topic filter, object path, or a SQL view of one table, whose
            query is run on each logged change the way the relay runs it).
        key: the dataset's key column; index: its index columns (coordinates, topic, path).
        log: the publisher's log.
        dataset: the dataset's name.
    """
    report = Audit(delivered=len(updates))
    if not updates:
        return report
    seqs = [u.seq for u in updates]
    report.first, report.last = seqs[0], max(seqs)
    _count_order(updates, report)
    entries = list(log.read(dataset, updates[0].epoch, min(seqs), max(seqs)))
    select = _selector(view, key, tuple(index), dataset, entries)
    changes = {entry.seq: entry.rows.to_pydict() for entry in entries}
    held: dict[Any, dict[str, Any]] = {}
    seen: set[int] = set()
    for update in updates:
        if update.seq in seen:
            continue
        seen.add(update.seq)
        logged = changes.get(update.seq)
        if logged is None:
            report.mismatched += 1
            report.note(f"seq {update.seq}: not in the publisher's log")
            continue
        problem = _replay(update, logged, select(logged), key, held)
        if problem is not None:
            report.mismatched += 1
            report.note(f"seq {update.seq}: {problem}")
    report.held = set(held)
    return report


Rows = dict[Any, dict[str, Any]]
"""Rows by key, each a column -> value mapping."""


def _selector(
    view: Selecting | Sql,
    key: str,
    index: tuple[str, ...],
    dataset: str,
    entries: Sequence[LogEntry],
) -> Callable[[dict[str, list[Any]]], Rows]:
    """What of a logged change (columns -> values) the view selects, as its subscriber gets it:
    the live rows it holds by key (a SQL view's: its query's rows)."""
    if not isinstance(view, Sql):

        def select(logged: dict[str, list[Any]]) -> Rows:
            live = _live(logged, key)
            if not live:
                return {}
            columns = {c: [row[c] for row in live.values()] for c in next(iter(live.values()))}
            mask = members(view, columns, index).tolist()
            return {k: row for (k, row), hit in zip(live.items(), mask, strict=True) if hit}

        return select
    if not entries:
        return lambda logged: {}
    schema = entries[0].rows.schema
    info = DatasetInfo(
        dataset,
        key,
        {f.name: _wire(f.type) for f in schema if not f.name.startswith("_")},
        "sql",
        [],
    )
    store = TableStore()
    store.define(info)
    query = store.prepare(view, {dataset: info})

    def run(logged: dict[str, list[Any]]) -> Rows:
        live = _live(logged, key)
        if not live:
            return {}
        names = list(info.columns)
        columns = {n: np.asarray([row[n] for row in live.values()]) for n in names}
        result = store.evaluate_rows(query, columns)
        lists = {name: values.tolist() for name, values in result.rows.items()}
        return {
            k: {name: lists[name][i] for name in lists} for i, k in enumerate(result.keys.tolist())
        }

    return run


def _live(logged: dict[str, list[Any]], key: str) -> Rows:
    """The logged change's upserted rows by key (internal columns dropped)."""
    deleted = logged.get("_deleted") or [False] * len(logged[key])
    names = [c for c in logged if not c.startswith("_")]
    return {
        k: {c: logged[c][i] for c in names}
        for i, (k, gone) in enumerate(zip(logged[key], deleted, strict=True))
        if not gone
    }


def _wire(kind: pa.DataType) -> str:
    """A logged column's wire dtype (``DatasetInfo.columns``)."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "str"
    return str(np.dtype(kind.to_pandas_dtype()).str)


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
    logged: dict[str, list[Any]],
    selected: Rows,
    key: str,
    held: Rows,
) -> str | None:
    """Check one update against its seq's logged change (``selected``: the rows of it the view
    holds) and apply it to ``held``."""
    entered, updated = _rows(update.entered, key), _rows(update.updated, key)
    left = set(update.left.tolist())
    if update.full:
        held.clear()
        held.update(entered)
        wrong = [k for k, row in entered.items() if k in selected and not _same(row, selected[k])]
        return f"full push rows {wrong[:5]} differ from the log" if wrong else None
    inside = set(selected)
    expect_entered, expect_updated = inside - set(held), inside & set(held)
    expect_left = {k for k in logged[key] if k in held and k not in inside}
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
    lists = [columns[n].tolist() for n in names]
    return {
        row[key]: row
        for row in (dict(zip(names, v, strict=True)) for v in zip(*lists, strict=True))
    }


def _same(row: dict[str, Any], logged: dict[str, Any]) -> bool:
    """The received row's columns hold the logged values (a projection sends fewer)."""
    return all(logged.get(c, value) == value for c, value in row.items())
