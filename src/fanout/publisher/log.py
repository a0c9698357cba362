"""The publisher's batch log: the only durable copy of the stream (004; DESIGN.md section 6).

Relays keep no persistent state (004, claim 1: "eliminate a need for persistent storage of
messages at brokers operating in the intermediate broker mode"), so whatever a relay or an
``every``-mode subscriber must get again after a crash is replayed from here. Per
(dataset, epoch, seq) the log holds one micro-batch's changed rows, before per-relay matching (the
declared columns plus ``_version`` and ``_deleted``), with its tick and tick time. Replaying for a
relay re-matches logged rows against that relay's primitives.

Rules every backend keeps:

1. ``append`` is durable when it returns, and idempotent on (dataset, epoch, seq): Spark re-runs a
   micro-batch after a crash with the same seq, and the first write wins. Replacing an entry
   could make a replay disagree with what relays already received.
2. The log only ever loses a *prefix* of a stream (``trim``, ``apply_retention``), and remembers
   how far it trimmed; an append below that point is a no-op too (a re-run of a micro-batch that
   was logged and trimmed), so a stream never has a hole in front of its first entry.
3. ``read`` never hides a gap: a seq it cannot return raises ``LogGap``, naming which seqs and
   why (trimmed, never logged, not logged yet).

Storage: one SQL table keyed by (dataset, epoch, seq), rows as Arrow IPC stream blobs, plus one
small table of trim points. SQLite is the default (one host); PostgreSQL is the shared option for
several hosts. Each log object has one write connection and one read connection, each behind its
own lock: the Spark callback thread appends while the control plane's asyncio thread reads, and
WAL (SQLite) or MVCC (PostgreSQL) lets the two proceed together. The interface and what an entry
holds are in ``publisher.batchlog`` (re-exported here).
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from fanout.errors import ConfigError
from fanout.publisher.batchlog import (
    BatchLog,
    Gap,
    LogEntry,
    LogGap,
    Retention,
    Stream,
    decode_rows,
    encode_rows,
    find_gaps,
)

__all__ = [
    "BatchLog",
    "Gap",
    "LogEntry",
    "LogGap",
    "PostgresLog",
    "Retention",
    "SqliteLog",
    "check_log_url",
    "decode_rows",
    "encode_rows",
    "find_gaps",
    "open_log",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Entries fetched per round trip while reading (each can be megabytes of rows).
READ_PAGE = 8


class _Db(Protocol):
    """What the SQL log needs of a connection, inside a transaction or a read."""

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        """Run a query; its rows."""

    def change(self, sql: str, *params: object) -> int:
        """Run a statement; how many rows it changed."""


class _SqlLog(BatchLog):
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
    def _transact(self, work: Callable[[_Db], T]) -> T:
        """Run ``work`` in one transaction on the write connection, committed on return."""

    @abstractmethod
    def _query(self, work: Callable[[_Db], T]) -> T:
        """Run ``work`` on the read connection."""

    @abstractmethod
    def _disconnect(self) -> None:
        """Close both connections."""

    def _write(self, work: Callable[[_Db], T]) -> T:
        with self._write_lock:
            self._check_open()
            return self._transact(work)

    def _read(self, work: Callable[[_Db], T]) -> T:
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
        def look(db: _Db) -> tuple[list[int], int, tuple[int, int] | None]:
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


def _bounds(db: _Db, dataset: str, epoch: int) -> tuple[int, int] | None:
    low, high = db.fetch(_BOUNDS, dataset, epoch)[0]
    return None if low is None else (int(low), int(high))


def _trimmed_below(db: _Db, dataset: str, epoch: int) -> int:
    rows = db.fetch(_TRIMMED, dataset, epoch)
    return int(rows[0][0]) if rows else 0


def _delete_below(db: _Db, dataset: str, epoch: int, below: int) -> int:
    """Drop seqs < ``below`` and raise the trim point past the last one dropped."""
    (highest,) = db.fetch(_HIGHEST_BELOW, dataset, epoch, below)[0]
    if highest is None:
        return 0
    dropped = db.change(_DELETE_BELOW, dataset, epoch, below)
    db.change(_MARK_TRIMMED, dataset, epoch, int(highest) + 1)
    return dropped


def _retain(db: _Db, stream: Stream, policy: Retention, now: float) -> int:
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


def _cut_by_count(db: _Db, stream: Stream, keep: int, past_end: int) -> int:
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


_BLOB_STORAGE = (
    "SELECT attstorage FROM pg_attribute"
    " WHERE attrelid = 'fanout_log'::regclass AND attname = 'rows'"
)


def _schema(*, integer: str, real: str, blob: str) -> list[str]:
    """The log's two tables in a backend's type names, one statement each."""
    sql = _SCHEMA.format(int=integer, float=real, blob=blob)
    return [statement for statement in sql.split(";") if statement.strip()]


class _SqliteDb:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, params).fetchall()

    def change(self, sql: str, *params: object) -> int:
        return self.connection.execute(sql, params).rowcount


class SqliteLog(_SqlLog):
    """The log in one SQLite file: WAL, ``synchronous=FULL`` (every commit is fsynced).

    Two connections, one for writes and one for reads, each behind its own lock; in WAL mode a
    reader never blocks the writer, so the Spark thread's appends do not wait for replays.
    """

    def __init__(self, path: str | Path) -> None:
        """Open the log at ``path``, creating the file and its folder if missing.

        Raises:
            sqlite3.Error: the file cannot be opened or is not a SQLite database.
            OSError: the folder cannot be created.
            ConfigError: SQLite refuses WAL mode there (a network file system, say).
        """
        super().__init__(str(path))
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        try:
            self._reader = self._connect()
        except BaseException:
            self._writer.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; ``_transact`` opens its own.
        connection = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        try:
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise ConfigError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            # FULL, not WAL's usual NORMAL: NORMAL can lose the last commits on power loss,
            # and an append must be durable when it returns.
            connection.execute("PRAGMA synchronous=FULL")
            for statement in _schema(integer="INTEGER", real="REAL", blob="BLOB"):
                connection.execute(statement)
        except BaseException:
            connection.close()
            raise
        return connection

    def _transact(self, work: Callable[[_Db], T]) -> T:
        # IMMEDIATE takes SQLite's write lock at BEGIN, so what ``work`` reads cannot be
        # changed by another process before it writes.
        self._writer.execute("BEGIN IMMEDIATE")
        try:
            result = work(_SqliteDb(self._writer))
        except BaseException:
            self._writer.execute("ROLLBACK")
            raise
        self._writer.execute("COMMIT")
        return result

    def _query(self, work: Callable[[_Db], T]) -> T:
        return work(_SqliteDb(self._reader))

    def _disconnect(self) -> None:
        self._writer.close()
        self._reader.close()


class _PostgresDb:
    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        # Binary results: bytea arrives as raw bytes, not hex text to decode.
        return self.connection.execute(_postgres_sql(sql), params, binary=True).fetchall()

    def change(self, sql: str, *params: object) -> int:
        return self.connection.execute(_postgres_sql(sql), params).rowcount


def _postgres_sql(sql: str) -> str:
    # The shared statements use SQLite's ``?``; none contains a literal ``?`` or ``%``.
    return sql.replace("?", "%s")


class PostgresLog(_SqlLog):
    """The log in a PostgreSQL database, shared by several hosts; tables created if missing.

    Connections run with ``synchronous_commit = on`` whatever the server's default, so a commit
    has reached the server's WAL on disk (and its synchronous standbys) when ``append`` returns.
    Like ``SqliteLog``: one write and one read connection, each behind its own lock. A
    connection the server or network dropped is replaced and the operation retried once (a
    warning is logged): every operation of the log is idempotent, so a retry after a lost
    acknowledgement is safe.
    """

    def __init__(self, dsn: str) -> None:
        """Connect to ``dsn`` (a libpq URL or ``key=value`` string) and create the tables.

        Raises:
            psycopg.OperationalError: the server cannot be reached or refuses the login.
        """
        super().__init__("on PostgreSQL")
        self.dsn = dsn
        self._writer = self._connect()
        try:
            self._create_schema()
            self._reader = self._connect()
        except BaseException:
            self._writer.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        params: dict[str, Any] = conninfo_to_dict(self.dsn)
        params.setdefault("application_name", "fanout-log")
        params.setdefault("connect_timeout", 10)
        connection = psycopg.connect(**params, autocommit=True)
        connection.execute("SET synchronous_commit = on")
        return connection

    def _create_schema(self) -> None:
        with self._writer.transaction():
            # Hosts starting together would race on CREATE TABLE IF NOT EXISTS (it is not
            # atomic in PostgreSQL); a transaction-scoped advisory lock serialises them.
            self._writer.execute("SELECT pg_advisory_xact_lock(hashtext('fanout_log'))")
            for statement in _schema(integer="BIGINT", real="DOUBLE PRECISION", blob="BYTEA"):
                self._writer.execute(statement)
            # Arrow buffers of numbers barely compress, and trying costs appends 3-4x their
            # time (bench/log.py): store the blobs out of line, uncompressed. Altered only when
            # needed, since ALTER TABLE briefly locks out the other hosts' appends.
            (storage,) = self._writer.execute(_BLOB_STORAGE).fetchone() or ("e",)
            if storage != "e":
                self._writer.execute(
                    "ALTER TABLE fanout_log ALTER COLUMN rows SET STORAGE EXTERNAL"
                )

    def _transact(self, work: Callable[[_Db], T]) -> T:
        try:
            return self._in_transaction(work)
        except psycopg.OperationalError as exc:
            if not self._writer.broken:
                raise
            self._writer = self._reconnect(self._writer, exc)
        return self._in_transaction(work)

    def _in_transaction(self, work: Callable[[_Db], T]) -> T:
        with self._writer.transaction():
            return work(_PostgresDb(self._writer))

    def _query(self, work: Callable[[_Db], T]) -> T:
        try:
            return work(_PostgresDb(self._reader))
        except psycopg.OperationalError as exc:
            if not self._reader.broken:
                raise
            self._reader = self._reconnect(self._reader, exc)
        return work(_PostgresDb(self._reader))

    def _reconnect(
        self, broken: psycopg.Connection[Any], error: psycopg.OperationalError
    ) -> psycopg.Connection[Any]:
        # Every operation of the log is idempotent, so the caller runs it once more on the new
        # connection, even if the lost one had committed it.
        logger.warning("publisher log: connection to PostgreSQL lost (%s); reconnecting", error)
        broken.close()
        return self._connect()

    def _disconnect(self) -> None:
        self._writer.close()
        self._reader.close()


def open_log(url: str) -> BatchLog:
    """Open the publisher log a URL names (see ``check_log_url`` for the forms).

    Returns:
        A ``SqliteLog`` or a ``PostgresLog``.

    Raises:
        ConfigError: the URL is not a log URL, or the log it names cannot be opened; the message
            names the URL, its password masked.
    """
    kind, target = _parse_log_url(url)
    try:
        return SqliteLog(target) if kind == "sqlite" else PostgresLog(target)
    except (sqlite3.Error, OSError, psycopg.Error) as exc:
        raise ConfigError(_masked(f"cannot open the publisher log {url}: {exc}", url)) from exc


def check_log_url(url: str) -> None:
    """Check a log URL without opening it (for configuration files).

    Args:
        url: ``sqlite:///abs/path.db``, ``sqlite:relative/path.db`` (to the working directory)
            or ``postgresql://user@host:port/db`` (any libpq URL; ``postgres://`` too).

    Raises:
        ConfigError: anything else, naming the URL.
    """
    _parse_log_url(url)


def _parse_log_url(url: str) -> tuple[Literal["sqlite", "postgresql"], str]:
    """(backend, SQLite path or PostgreSQL DSN) of a log URL."""
    scheme, _, rest = url.partition(":")
    if scheme.lower() in ("postgresql", "postgres") and rest.startswith("//"):
        return "postgresql", url
    if scheme.lower() != "sqlite":
        usage = "use sqlite:///ABSOLUTE/PATH.db, sqlite:RELATIVE/PATH.db or postgresql://..."
        raise ConfigError(_masked(f"unsupported publisher log URL {url!r}: {usage}", url))
    if rest.startswith("///"):
        rest = rest[2:]
    elif rest.startswith("//"):
        raise ConfigError(
            f"publisher log URL {url!r} names a host; SQLite takes sqlite:///ABSOLUTE/PATH.db "
            "or sqlite:RELATIVE/PATH.db"
        )
    if rest in ("", ":memory:") or rest.endswith("/"):
        raise ConfigError(f"publisher log URL {url!r} names no file (the log must be durable)")
    return "sqlite", rest


def _masked(text: str, url: str) -> str:
    """``text`` with the password of ``url`` (wherever ``text`` quotes it) replaced by ``***``.

    Works when ``url`` does not parse, too: libpq's errors quote a malformed URL whole.
    """
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    user, colon, password = authority.rpartition("@")[0].partition(":")
    if not (colon and password):
        return text
    return text.replace(f"{user}:{password}@", f"{user}:***@")
