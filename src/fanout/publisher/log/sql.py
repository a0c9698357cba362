"""The log's logic in SQL that both backends run: one table keyed by (dataset, epoch, seq), rows
as Arrow IPC stream blobs, plus one small table of trim points.

Each log object has one write connection and one read connection, each behind its own lock: the
Spark callback thread appends while the control plane's asyncio thread reads, and WAL (SQLite) or
MVCC (PostgreSQL) lets the two proceed together. The statements use SQLite's ``?`` placeholders;
the backends (``log.sqlite``, ``log.postgres``) supply the connections.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from fanout.publisher.log.base import (
    BatchLog,
    LogEntry,
    LogGap,
    Retention,
    Stream,
    decode_rows,
    encode_rows,
    find_gaps,
)

T = TypeVar("T")

#: Entries fetched per round trip while reading (each can be megabytes of rows).
READ_PAGE = 8


class Db(Protocol):
    """What the SQL log needs of a connection, inside a transaction or a read."""

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """Run a query; its rows."""

    def change(self, sql: str, *params: object) -> int:
        """Run a statement; how many rows it changed."""


class SqlLog(BatchLog):
    """The log's logic in SQL that SQLite and PostgreSQL both run (``?`` placeholders).

    Backends supply ``_transact`` (a transaction on the write connection), ``_query`` (the read
    connection) and ``_disconnect``; this class holds each connection's lock for the duration of
    one unit of work.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._closed = False
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()

    @abstractmethod
    def _transact(self, work: Callable[[Db], T]) -> T:
        """Run ``work`` in one transaction on the write connection, committed on return."""

    @abstractmethod
    def _query(self, work: Callable[[Db], T]) -> T:
        """Run ``work`` on the read connection."""

    @abstractmethod
    def _disconnect(self) -> None:
        """Close both connections."""

    def _write(self, work: Callable[[Db], T]) -> T:
        with self._write_lock:
            self._check_open()
            return self._transact(work)

    def _read(self, work: Callable[[Db], T]) -> T:
        with self._read_lock:
            self._check_open()
            return self._query(work)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the publisher log {self._name} is closed")

    def close(self) -> None:
        """See ``BatchLog.close``."""
        with self._write_lock, self._read_lock:
            if not self._closed:
                self._closed = True
                self._disconnect()

    def append(self, entry: LogEntry) -> None:
        """See ``BatchLog.append``."""
        blob = memoryview(encode_rows(entry.rows))
        # int()/float(): the drivers bind only Python numbers, not numpy's.
        stream = (entry.dataset, int(entry.epoch))
        seq, tick, tick_time = int(entry.seq), int(entry.tick), float(entry.tick_time)
        # One statement: the insert happens only above the trim point, and not over an entry.
        self._write(
            lambda db: db.change(_INSERT, *stream, seq, tick, tick_time, blob, *stream, seq)
        )

    def read(self, dataset: str, epoch: int, first: int, last: int) -> Iterator[LogEntry]:
        """See ``BatchLog.read``."""
        if first > last:
            return iter(())
        held = self._read(lambda db: db.fetch(_COUNT, dataset, epoch, first, last)[0][0])
        if held != last - first + 1:
            raise self._gap(dataset, epoch, first, last)
        return self._entries(dataset, epoch, first, last)

    def _entries(self, dataset: str, epoch: int, first: int, last: int) -> Iterator[LogEntry]:
        seq = first
        while seq <= last:
            page = self._page(dataset, epoch, seq, last)
            if not page:
                raise self._gap(dataset, epoch, seq, last)
            for got, tick, tick_time, blob in page:
                # A seq skipped here was trimmed after ``read`` checked the range.
                if got != seq:
                    raise self._gap(dataset, epoch, seq, last)
                yield LogEntry(dataset, epoch, seq, tick, tick_time, decode_rows(blob))
                seq += 1

    def _page(self, dataset: str, epoch: int, first: int, last: int) -> list[tuple[Any, ...]]:
        return self._read(lambda db: db.fetch(_PAGE, dataset, epoch, first, last, READ_PAGE))

    def _gap(self, dataset: str, epoch: int, first: int, last: int) -> LogGap:
        def look(db: Db) -> tuple[list[int], int, tuple[int, int] | None]:
            held = [row[0] for row in db.fetch(_HELD, dataset, epoch, first, last)]
            return held, _trimmed_below(db, dataset, epoch), _bounds(db, dataset, epoch)

        held, trimmed_below, bounds = self._read(look)
        last_held = None if bounds is None else bounds[1]
        gaps = find_gaps(first, last, held, trimmed_below, last_held)
        return LogGap(dataset, epoch, gaps, bounds)

    def bounds(self, dataset: str, epoch: int) -> tuple[int, int] | None:
        """See ``BatchLog.bounds``."""
        return self._read(lambda db: _bounds(db, dataset, epoch))

    def trim(self, dataset: str, epoch: int, below: int) -> int:
        """See ``BatchLog.trim``."""
        return self._write(lambda db: _delete_below(db, dataset, epoch, below))

    def apply_retention(self, policy: Retention, now: float) -> int:
        """See ``BatchLog.apply_retention``."""
        streams = self._read(lambda db: [(row[0], row[1]) for row in db.fetch(_STREAMS)])
        # One transaction per stream keeps the writer's lock short between micro-batches.
        return sum(self._retain(stream, policy, now) for stream in streams)

    def _retain(self, stream: Stream, policy: Retention, now: float) -> int:
        return self._write(lambda db: _retain(db, stream, policy, now))


def _bounds(db: Db, dataset: str, epoch: int) -> tuple[int, int] | None:
    low, high = db.fetch(_BOUNDS, dataset, epoch)[0]
    return None if low is None else (int(low), int(high))


def _trimmed_below(db: Db, dataset: str, epoch: int) -> int:
    rows = db.fetch(_TRIMMED, dataset, epoch)
    return int(rows[0][0]) if rows else 0


def _delete_below(db: Db, dataset: str, epoch: int, below: int) -> int:
    """Drop seqs < ``below`` and raise the trim point past the last one dropped."""
    (highest,) = db.fetch(_HIGHEST_BELOW, dataset, epoch, below)[0]
    if highest is None:
        return 0
    dropped = db.change(_DELETE_BELOW, dataset, epoch, below)
    db.change(_MARK_TRIMMED, dataset, epoch, int(highest) + 1)
    return dropped


def _retain(db: Db, stream: Stream, policy: Retention, now: float) -> int:
    """Apply ``policy`` to one stream: drop its expired prefix below the holders' floor."""
    dataset, epoch = stream
    bounds = _bounds(db, dataset, epoch)
    if bounds is None:
        return 0
    past_end = bounds[1] + 1
    # Each limit expires a prefix of the stream; an entry goes if either expires it.
    cut = bounds[0]
    if policy.max_entries is not None:
        cut = max(cut, _cut_by_count(db, stream, policy.max_entries, past_end))
    if policy.max_age_seconds is not None:
        (young,) = db.fetch(_FIRST_YOUNG, dataset, epoch, now - policy.max_age_seconds)[0]
        cut = max(cut, past_end if young is None else int(young))
    return _delete_below(db, dataset, epoch, min(cut, policy.floor.get(stream, past_end)))


def _cut_by_count(db: Db, stream: Stream, keep: int, past_end: int) -> int:
    """The first seq among the stream's newest ``keep`` entries."""
    if keep == 0:
        return past_end
    newest = db.fetch(_NTH_NEWEST, *stream, keep - 1)
    return int(newest[0][0]) if newest else 0


_INSERT = """
INSERT INTO fanout_log (dataset, epoch, seq, tick, tick_time, rows)
SELECT ?, ?, ?, ?, ?, ?
WHERE NOT EXISTS (
    SELECT 1 FROM fanout_log_streams WHERE dataset = ? AND epoch = ? AND trimmed_below > ?
)
ON CONFLICT DO NOTHING
"""
_COUNT = "SELECT count(*) FROM fanout_log WHERE dataset = ? AND epoch = ? AND seq BETWEEN ? AND ?"
_HELD = (
    "SELECT seq FROM fanout_log WHERE dataset = ? AND epoch = ? AND seq BETWEEN ? AND ?"
    " ORDER BY seq"
)
_PAGE = (
    "SELECT seq, tick, tick_time, rows FROM fanout_log"
    " WHERE dataset = ? AND epoch = ? AND seq BETWEEN ? AND ? ORDER BY seq LIMIT ?"
)
_BOUNDS = "SELECT min(seq), max(seq) FROM fanout_log WHERE dataset = ? AND epoch = ?"
_TRIMMED = "SELECT trimmed_below FROM fanout_log_streams WHERE dataset = ? AND epoch = ?"
_STREAMS = "SELECT DISTINCT dataset, epoch FROM fanout_log ORDER BY dataset, epoch"
_HIGHEST_BELOW = "SELECT max(seq) FROM fanout_log WHERE dataset = ? AND epoch = ? AND seq < ?"
_DELETE_BELOW = "DELETE FROM fanout_log WHERE dataset = ? AND epoch = ? AND seq < ?"
_MARK_TRIMMED = """
INSERT INTO fanout_log_streams (dataset, epoch, trimmed_below) VALUES (?, ?, ?)
ON CONFLICT (dataset, epoch) DO UPDATE SET trimmed_below = excluded.trimmed_below
WHERE fanout_log_streams.trimmed_below < excluded.trimmed_below
"""
_NTH_NEWEST = (
    "SELECT seq FROM fanout_log WHERE dataset = ? AND epoch = ? ORDER BY seq DESC LIMIT 1 OFFSET ?"
)
_FIRST_YOUNG = "SELECT min(seq) FROM fanout_log WHERE dataset = ? AND epoch = ? AND tick_time >= ?"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS fanout_log (
    dataset TEXT NOT NULL,
    epoch {int} NOT NULL,
    seq {int} NOT NULL,
    tick {int} NOT NULL,
    tick_time {float} NOT NULL,
    rows {blob} NOT NULL,
    PRIMARY KEY (dataset, epoch, seq)
);
CREATE TABLE IF NOT EXISTS fanout_log_streams (
    dataset TEXT NOT NULL,
    epoch {int} NOT NULL,
    trimmed_below {int} NOT NULL,
    PRIMARY KEY (dataset, epoch)
)
"""


def schema(*, integer: str, real: str, blob: str) -> list[str]:
    """The log's two tables in a backend's type names, one statement each."""
    sql = _SCHEMA.format(int=integer, float=real, blob=blob)
    return [statement for statement in sql.split(";") if statement.strip()]
