"""Point-in-time reads of a dataset's state: the rows as of the end of one micro-batch.

Spark's state store keeps the latest row per key for each of the last micro-batches
(``publisher.state``); the pipeline remembers at which tick each one ended (its *history*), so a
reader who asks for the rows inside a view at a tick gets exactly the state at that tick, cut
with the view's own matcher.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from fanout.errors import BadRequest
from fanout.publisher.datasets import Dataset
from fanout.publisher.matching import Matcher, MatchTables
from fanout.publisher.state import live_rows, read_state
from fanout.views import View

#: Seconds between two looks at whether a micro-batch is there (or committed) yet.
POLL = 0.05


@dataclass(frozen=True)
class StateStore:
    """Where one dataset's state is read: its Spark session, its declaration, its matcher and
    the checkpoint whose state store holds the latest row per key."""

    spark: SparkSession
    dataset: Dataset
    matcher: Matcher
    checkpoint: str


def read_view(
    store: StateStore, history: Sequence[tuple[int, int]], view: View, tick: int, timeout: float
) -> tuple[int, pa.Table]:
    """The authoritative rows inside ``view`` as of ``tick`` (-1: the latest tick).

    Reads the state store at the micro-batch that ended at ``tick`` (waiting for Spark to
    commit it), so the rows returned are exactly the state at that tick.

    Args:
        store: the dataset's state.
        history: (tick, batch id) of recent micro-batches, oldest first; the pipeline appends
            to it as micro-batches are delivered, and this waits for ``tick`` to appear.
        view: what to read.
        tick: the tick to read at.
        timeout: seconds to wait for ``tick`` and its commit.

    Returns:
        (the tick, rows with the dataset's columns, one per key).

    Raises:
        TimeoutError: ``tick`` was not reached within ``timeout`` seconds.
        InvalidView: the view does not fit the dataset's index.
        BadRequest: ``tick`` is too old to read back, or no micro-batch ended at it.
    """
    view = store.matcher.check(view)
    deadline = time.monotonic() + timeout
    while not history or history[-1][0] < tick:
        if time.monotonic() > deadline:
            at = f"tick {history[-1][0]}" if history else "no batch yet"
            raise TimeoutError(f"state is at {at}, not yet at tick {tick}")
        time.sleep(POLL)
    tick, batch_id = batch_at(list(history), tick)
    tables = store.matcher.tables(store.spark, [(0, 0, view)])
    try:
        table = read_committed(store, batch_id, tables, deadline)
    finally:
        tables.unpersist()
    keys = table.column(store.dataset.key).to_numpy(zero_copy_only=False)
    _, first = np.unique(keys, return_index=True)
    return tick, table.take(pa.array(np.sort(first)))


def batch_at(history: Sequence[tuple[int, int]], tick: int) -> tuple[int, int]:
    """The (tick, batch id) of the micro-batch that ended at ``tick`` (-1: the last one).

    Raises:
        BadRequest: ``tick`` is older than ``history`` goes, or no micro-batch ended at it.
    """
    if tick < 0:
        return history[-1]
    matches = [entry for entry in history if entry[0] == tick]
    if matches:
        return matches[-1]
    oldest = history[0][0]
    reason = "is older than the state kept" if tick < oldest else "is not where a micro-batch ended"
    raise BadRequest(f"tick {tick} {reason} (readable: {oldest}..{history[-1][0]})")


def read_committed(
    store: StateStore,
    batch_id: int,
    tables: MatchTables,
    deadline: float,
    all_columns: bool = False,
) -> pa.Table:
    """The live rows matching ``tables`` in the state after micro-batch ``batch_id``.

    Args:
        store: the dataset's state.
        batch_id: the micro-batch; waited for until it is committed.
        tables: the matcher's tables of the primitives to cut.
        deadline: ``time.monotonic()`` after which waiting for the commit gives up.
        all_columns: keep the matcher's ``_relay`` and ``_prim`` too (else the dataset's
            columns only).

    Raises:
        TimeoutError: the micro-batch was not committed by ``deadline``.
    """
    # Spark commits a micro-batch just after its foreachBatch returns; until then the state
    # store refuses to read it, so wait for the commit rather than read an older version.
    dataset = store.dataset
    while True:
        try:
            state = live_rows(read_state(store.spark, store.checkpoint, dataset, batch_id))
            rows = store.matcher.match(state, tables)
            return (rows if all_columns else rows.select(*dataset.columns)).toArrow()
        except PySparkException as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"batch {batch_id} was not committed in time: {exc}") from exc
            time.sleep(POLL)
