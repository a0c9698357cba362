"""A live tail of a logically captured table's committed changes, in the publisher's process
(docs/caches.md, "A database commit at once"): each committed transaction is published on the
bus as soon as PostgreSQL decodes it, under the ``_version`` its micro-batch will carry, which
then confirms it (``bustable`` rules 6 and 7). Rules:

1. **Its own temporary slot** on the capture's publication, confirmed as it reads (it keeps no
   WAL; the server drops it with the session), decoded and loaded as the capture does
   (``changes_of``, ``LoadedValues``, ``to_batches``): a change the capture refuses is not shown.
2. **Numbered from the capture's anchor** (``sources.livenumbers``, ``sources.anchors``),
   asked for (past the tail's start) until it comes, then read every ``ANCHOR_EVERY`` s: one of
   another slot, or contradicting the count, ends the tail's slot and it starts again.
3. **Never in the way**: a database away, a broken stream, a truncate: logged, and the tail
   starts again after a pause; the micro-batches carry everything meanwhile.
4. **Logical capture only**: a trigger-captured table has no tail (no publication to read;
   looked at again every ``RESTART_MAX`` s, so a capture installed later is followed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg2
import pyarrow as pa
from psycopg import sql
from psycopg.adapt import Transformer
from psycopg.types.json import set_json_loads
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, StructType

from fanout.publisher.datasets import DELETED, VERSION
from fanout.publisher.sources import pgoutput
from fanout.publisher.sources.anchors import anchor_of, wait_for_anchor
from fanout.publisher.sources.livenumbers import Numbering
from fanout.publisher.sources.postgres_logical import SESSION, SETTINGS, capture_name, changes_of
from fanout.publisher.sources.postgres_reader import CaptureError, ReaderOptions
from fanout.publisher.sources.postgres_values import (
    PROBLEM,
    LoadedValues,
    Row,
    exact_json,
    to_batches,
)
from fanout.publisher.sources.slotstream import SlotStream

log = logging.getLogger(__name__)

#: Seconds between two reads of the anchor once the tail counts (rule 2); before, ``ANCHOR_WAIT``.
ANCHOR_EVERY, ANCHOR_WAIT = 1.0, 0.1
#: Seconds a receive waits for a transaction (the stop and the anchor are looked at between).
RECEIVE_WAIT = 0.05
#: Seconds before the tail starts again after a failure, doubling up to ``RESTART_MAX``.
RESTART_FIRST, RESTART_MAX = 0.5, 10.0

#: What the tail hands a table's committed changes to: rows, versions, deletes
#: (``BusConnector.publish_written``).
Publish = Callable[[list[dict[str, Any]], list[int], list[bool]], None]
Changes = list[tuple[bool, dict[str, Any]]]


def source_schema(options: ReaderOptions) -> pa.Schema:
    """The Arrow schema of the capture's rows (its columns, ``_version``, ``_deleted``,
    ``_problem``); Spark parses the columns, so a session must be running."""
    declared = f"{options.schema}, `{VERSION}` bigint, `{DELETED}` boolean, `{PROBLEM}` string"
    struct = DataType.fromDDL(declared)
    assert isinstance(struct, StructType)
    return to_arrow_schema(struct, timezone="UTC")


class Restart(Exception):
    """The tail's count is no longer the capture's (rule 2)."""


class LiveTail:
    """One table's tail, on a daemon thread of its own (rules 1-4)."""

    def __init__(self, options: ReaderOptions, arrow_schema: pa.Schema, publish: Publish) -> None:
        """
        Args:
            options: the capture's (its table, key and database).
            arrow_schema: the capture's rows' (``source_schema``).
            publish: where the numbered changes go.
        """
        self.options = options
        self.arrow_schema = arrow_schema
        self.publish = publish
        self.published = 0  # changes handed over live
        self.restarts = 0
        self.counting = False  # whether the tail has its anchor (rule 2): commits go out at once
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def slot(self) -> str:
        """The temporary slot's name: the capture's, and ``_live``."""
        return capture_name(self.options.url, self.options.table) + "_live"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fanout-tail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        delay, told = RESTART_FIRST, False
        while not self._stopping.is_set():
            try:
                if not self._follow():  # looked at again: a capture installed later is followed
                    if not told:
                        log.info(
                            "table %s: captured by a trigger: no live tail", self.options.table
                        )
                    told, delay = True, RESTART_MAX
                    self._stopping.wait(delay)
                    continue
                delay = RESTART_FIRST
            except (
                psycopg.Error,
                psycopg2.Error,
                pgoutput.DecodeError,
                CaptureError,
                Restart,
            ) as e:
                self.restarts += 1
                log.warning("table %s: live tail: %s; again in %g s", self.options.table, e, delay)
            self._stopping.wait(delay)
            delay = min(delay * 2, RESTART_MAX)

    def _follow(self) -> bool:
        """Follow the table's changes until stopped (True), or say there is nothing to follow
        (False: rule 4).

        Raises:
            Restart, psycopg.Error, psycopg2.Error, pgoutput.DecodeError, CaptureError: rule 3.
        """
        table, url = self.options.table, self.options.url
        with psycopg.connect(url, autocommit=True) as db:
            name = capture_name(url, table)
            if not db.execute(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)
            ).fetchone():
                return False
            set_json_loads(exact_json, db)
            for setting, value in SETTINGS.items():
                db.execute(
                    sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value))
                )
            values = LoadedValues(Transformer.from_context(db))
            stream = SlotStream(url, self.slot, name, SESSION)
            numbering: Numbering[Changes] = Numbering(stream.start(temporary=True))
            log.info("table %s: live tail from %s", table, pgoutput.lsn_text(numbering.start))
            try:
                self._tail(db, stream, values, numbering)
            finally:
                self.counting = False
                stream.close()
        return True

    def _tail(
        self,
        db: psycopg.Connection[Any],
        stream: SlotStream,
        values: LoadedValues,
        numbering: Numbering[Changes],
    ) -> None:
        slot, polled, asked = None, 0.0, 0.0
        while not self._stopping.is_set():
            received = stream.receive(RECEIVE_WAIT)
            for transaction in received:
                changes = changes_of(transaction, values, self.options)
                self._hand_over(numbering.transaction(transaction.end_lsn, len(changes), changes))
            if received:
                stream.confirm(received[-1].end_lsn)
            now = time.monotonic()
            if now - polled < (ANCHOR_EVERY if numbering.anchored else ANCHOR_WAIT):
                continue
            polled = now
            anchor = anchor_of(db, self.options.table)
            waiting = not numbering.anchored and (anchor is None or anchor.lsn < numbering.start)
            if waiting and now - asked >= ANCHOR_EVERY:
                wait_for_anchor(db, self.options.table, numbering.start)
                asked = now
            if anchor is None:
                continue
            if slot not in (None, anchor.slot) or not numbering.check(anchor.lsn, anchor.last):
                raise Restart(f"the capture's anchor {anchor} is not the tail's count")
            self._hand_over(numbering.anchor(anchor.lsn, anchor.last))
            if numbering.anchored and slot is None:
                slot, self.counting = anchor.slot, True
                log.info(
                    "table %s: live tail counts from change %d", self.options.table, anchor.last
                )

    def _hand_over(self, numbered: list[tuple[int, Changes]]) -> None:
        """Publish numbered transactions' changes but those the capture refuses (rule 1)."""
        rows: list[Row] = [
            (first + at, deleted, data)
            for first, changes in numbered
            for at, (deleted, data) in enumerate(changes)
        ]
        if not rows:
            return
        batches = to_batches(rows, self.arrow_schema, self.options.table, self.options.key)
        found = pa.Table.from_batches(list(batches), schema=self.arrow_schema)
        kept = found.filter(found.column(PROBLEM).is_null())
        versions = kept.column(VERSION).to_pylist()
        deleted = kept.column(DELETED).to_pylist()
        self.publish(kept.drop_columns([VERSION, DELETED, PROBLEM]).to_pylist(), versions, deleted)
        self.published += len(versions)
