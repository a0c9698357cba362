"""The steps of one micro-batch, in the order ``Pipeline.on_micro_batch`` runs them:

1. **match** (``match_changes``): the changed rows are collected to the driver as Arrow and
   paired with the relays whose primitives hold them — in the driver for region primitives
   (``matching.local``), else by one Spark job (``publisher.matching``) —, with the match
   tables rebuilt only when the registry changed (``MatchTableCache``);
2. **log** (``log_changes``): the changed rows are appended to the log, durably, before any relay
   sees them; retention is applied every ``RETENTION_EVERY`` micro-batches;
3. **mirror**: the driver's copy of the live rows takes the changed rows (``Mirror.apply``);
4. **snapshot** (``snapshots``): the content of primitives acquired since the last micro-batch,
   from the mirror or else from the state store;
5. **build**: one stamped batch per relay (``delivery.build_batches``).

A quiet dataset runs no micro-batches; its fresh primitives' snapshots are cut from the last
committed state instead (``committed_snapshots``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from fanout.publisher.datasets import DELETED, VERSION, Dataset
from fanout.publisher.delivery import Stamp, rows_by_relay
from fanout.publisher.log import BatchLog, LogEntry, Retention
from fanout.publisher.matching import Matcher, MatchTables
from fanout.publisher.matching.local import LocalTables, match_local
from fanout.publisher.mirror import Mirror
from fanout.publisher.reads import StateStore, read_committed
from fanout.publisher.relaytable import Plan
from fanout.publisher.state import current_state

#: Retention is applied to the log every this many micro-batches.
RETENTION_EVERY = 50
#: Seconds idle snapshots wait at most for the micro-batch they read to be committed.
COMMIT_WAIT = 30.0


@dataclass(frozen=True)
class Changes:
    """A micro-batch's changed rows, matched.

    Attributes:
        rows: every changed row, one per key, sorted by key, with ``_version`` and ``_deleted``.
        matched: relay -> its live rows among them.
    """

    rows: pa.Table
    matched: dict[int, pa.Table]


class MatchTableCache:
    """The match tables of the registry's primitives, rebuilt when the primitives change."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._tables: tuple[int, MatchTables | None] = (-1, None)

    def tables(self, plan: Plan) -> MatchTables | None:
        """The tables of ``plan``'s primitives (None: no relay holds any)."""
        version, cached = self._tables
        if version == plan.version:
            return cached
        if cached is not None:
            cached.unpersist()
        prims = [(r, p, view) for r, held in plan.prims.items() for p, view in held.items()]
        tables: MatchTables | None = self._store.matcher.change_tables(self._store.spark, prims)
        self._tables = (plan.version, tables)
        return tables


def match_changes(
    changes: DataFrame, dataset: Dataset, matcher: Matcher, tables: MatchTables | None
) -> Changes:
    """Step 1: every changed row, paired with the relays holding it where any do: in the driver
    for ``LocalTables``, else in one Spark job with the collect."""
    if isinstance(tables, LocalTables):
        return _match_in_driver(changes.toArrow(), dataset, tables)
    if tables is None:
        table = changes.toArrow()
    else:
        table = matcher.match(changes, tables, keep_unmatched=True).toArrow()
    _, first = np.unique(
        table.column(dataset.key).to_numpy(zero_copy_only=False), return_index=True
    )
    internal = [c for c in table.column_names if c.startswith("_") and c not in (VERSION, DELETED)]
    rows = table.take(pa.array(first)).drop_columns(internal)
    if tables is None:
        return Changes(rows, {})
    live = pc.and_(pc.is_valid(table.column("_relay")), pc.invert(table.column(DELETED)))
    return Changes(rows, rows_by_relay(table.filter(live)))


def _match_in_driver(table: pa.Table, dataset: Dataset, tables: LocalTables) -> Changes:
    _, first = np.unique(
        table.column(dataset.key).to_numpy(zero_copy_only=False), return_index=True
    )
    rows = table.take(pa.array(first))
    matched = match_local(rows, tables, dataset.index_columns, dataset.key)
    deleted = rows.column(DELETED).to_numpy(zero_copy_only=False)
    columns = [name for name in rows.column_names if not name.startswith("_")]
    by_relay = {}
    for relay, indices in matched.items():
        live = indices[~deleted[indices]]
        if len(live):
            by_relay[relay] = rows.select(columns).take(pa.array(live))
    return Changes(rows, by_relay)


def advance(
    tick: int, tick_time: float, rows: pa.Table, time_column: str | None
) -> tuple[int, float]:
    """The stream's (tick, tick time) after a micro-batch's changed ``rows``: the newest
    ``_version`` among them, and the newest time in ``time_column`` (now, without one); never
    backwards, and unchanged by a micro-batch without rows."""
    if not rows.num_rows:
        return tick, tick_time
    newest = int(pc.max(rows.column(VERSION)).as_py())
    latest = pc.max(rows.column(time_column)).as_py() if time_column else time.time()
    return max(tick, newest), max(tick_time, float(latest))


def log_changes(
    log: BatchLog,
    stamp: Stamp,
    rows: pa.Table,
    floor: Callable[[], Mapping[tuple[str, int], int]],
    retention_seconds: float,
) -> None:
    """Step 2: append the changed rows to the log, durable when this returns.

    Raises:
        sqlite3.Error, psycopg.Error: the log could not store them; the micro-batch fails and
            Spark re-runs it, so no relay is sent what the log does not hold.
    """
    # Durable before any relay sees the batch: the log is the only durable copy of the stream
    # (``docs/delivery.md``).
    entry = LogEntry(stamp.dataset, stamp.epoch, stamp.seq, stamp.tick, stamp.tick_time, rows)
    log.append(entry)
    if stamp.seq % RETENTION_EVERY == 0:
        # Entries a connected relay still needs stay, however old: the log is trimmed only
        # once its holders released them (US 7,487,246, durable subscriptions).
        policy = Retention(max_age_seconds=retention_seconds, floor=floor())
        log.apply_retention(policy, now=time.time())


def mirrored(mirror: Mirror, batch_id: int) -> bool:
    """Whether micro-batch ``batch_id``'s snapshots will come from the mirror (so the changes
    need not be kept for a second read)."""
    if mirror.too_big:
        return False
    return batch_id == 0 or mirror.holds(batch_id - 1) or mirror.holds(batch_id)


def snapshots(
    store: StateStore, mirror: Mirror, plan: Plan, changes: DataFrame, batch_id: int
) -> dict[int, pa.Table]:
    """Step 4: relay -> the rows of its fresh primitives as of the end of ``batch_id``.

    The mirror must have taken the micro-batch's changes first (step 3).
    """
    fresh = [(r, p, plan.prims[r][p]) for r, prims in plan.fresh.items() for p in prims]
    if not fresh:
        return {}
    dataset = store.dataset
    if not mirror.too_big and not mirror.holds(batch_id):
        # After a restart: the state is read into the driver once, then kept up to date.
        state = current_state(store.spark, store.checkpoint, dataset, changes, batch_id)
        mirror.load(state.limit(mirror.max_rows + 1).toArrow(), batch_id)
    if mirror.holds(batch_id):
        return mirror.snapshots(fresh)
    tables = store.matcher.tables(store.spark, fresh)
    if tables is None:
        return {}
    try:
        state = current_state(store.spark, store.checkpoint, dataset, changes, batch_id)
        return rows_by_relay(store.matcher.match(state, tables).toArrow())
    finally:
        tables.unpersist()


def committed_snapshots(
    store: StateStore, mirror: Mirror, plan: Plan, batch_id: int
) -> dict[int, pa.Table]:
    """relay -> the rows of its fresh primitives in the committed state after ``batch_id``
    (for a quiet dataset, outside any micro-batch)."""
    fresh = [(r, p, plan.prims[r][p]) for r, prims in plan.fresh.items() for p in prims]
    if mirror.holds(batch_id):
        return mirror.snapshots(fresh)
    tables = store.matcher.tables(store.spark, fresh)
    try:
        deadline = time.monotonic() + COMMIT_WAIT
        return rows_by_relay(read_committed(store, batch_id, tables, deadline, all_columns=True))
    finally:
        tables.unpersist()
