"""Change capture by logical decoding (``sources.postgres``, ``capture = "logical"``): a slot's
``pgoutput`` stream (docs/configuration.md, "Capture by logical decoding"). Rules:

1. **Install** checks ``wal_level = logical``, the role's ``REPLICATION`` and the key in the
   replica identity, then creates the publication and refuses ``TRUNCATE``; no row trigger.
2. **Snapshot.** A new stream (re)creates the slot, whose exported snapshot the table's rows
   are copied under: every change after them is in the slot, none before.
3. **Offsets** name the last transaction read (its commit's end ``lsn``) and the last
   ``_version``; a read takes whole transactions, in commit order, after ``lsn``, from the
   slot's stream (``sources.slotstream``: decoded once by the server, caught up at each read).
4. **Confirmed only when durable.** ``commit`` confirms the slot's position (and trims the
   snapshot) once Spark committed the micro-batch; a quiet table's slot is moved past the WAL
   it decoded; a slot gone or taken by another stream is refused, never skipped.
5. **Anchors for a live tail** (``sources.anchors``): the snapshot's end and each read's end
   are kept (their numbers are fixed), and a quiet position when a tail waits for one.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg2
import pyarrow as pa
from psycopg import sql
from psycopg.adapt import Transformer

from fanout.publisher.sources import pgoutput
from fanout.publisher.sources.anchors import flushed_and_waited, keep_anchor, slot_source
from fanout.publisher.sources.postgres_reader import (
    RECONNECT_FOR,
    TABLES,
    CaptureError,
    ConnectedReader,
    ReaderOptions,
    refuse_truncate,
)
from fanout.publisher.sources.postgres_values import LoadedValues, Row, check_columns
from fanout.publisher.sources.slotstream import Enough, SlotStream, in_use

log = logging.getLogger(__name__)

#: Session settings of the slot's stream (the server's output functions spell values in
#: them) and of the reader's connection (whose loaders read those values).
SETTINGS = {"TimeZone": "UTC", "DateStyle": "ISO", "bytea_output": "hex"}
SESSION = " ".join(f"-c {name}={value}" for name, value in SETTINGS.items())
#: Seconds a read waits for the stream to catch up with the WAL flushed when it began (more
#: is left to the next read); a read of a micro-batch again waits up to ``RECONNECT_FOR``.
CATCH_UP = 5.0


def capture_name(url: str, table: str) -> str:
    """The slot's and the publication's name for ``table`` in ``url``'s database: ``fanout_``,
    the table's name as a slot may spell it, and a hash of both (slots are the server's)."""
    database = psycopg.conninfo.conninfo_to_dict(url).get("dbname", "")
    digest = hashlib.sha1(f"{database}.{table}".encode()).hexdigest()[:8]
    return f"fanout_{re.sub('[^a-z0-9_]', '_', table.lower())[:40]}_{digest}"


def why_not_logical(db: psycopg.Connection[Any]) -> str | None:
    """Why this server or role cannot decode (rule 1), or None if it can."""
    level = db.execute("SHOW wal_level").fetchone()
    if level is None or level[0] != "logical":
        found = level[0] if level else "unknown"
        return (
            f"the server's wal_level is {found!r}, not 'logical' (set wal_level = logical in"
            ' postgresql.conf and restart it, or capture = "trigger")'
        )
    (may,) = db.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone() or (False,)
    if not may:
        return 'the role lacks REPLICATION (ALTER ROLE ... REPLICATION, or capture = "trigger")'
    return None


def install_logical(url: str, table: str, key: str, columns: Mapping[str, str]) -> None:
    """Capture ``table``'s changes by logical decoding (rule 1).

    Raises:
        CaptureError: the database cannot be reached or cannot decode, the table lacks a
            column or has one of another type, or its replica identity lacks the key.
    """
    try:
        with psycopg.connect(url) as db:
            check_columns(db, table, columns)
            why = why_not_logical(db)
            if why is not None:
                raise ValueError(f"postgres source for table {table!r}: {why}")
            _check_identity(db, table, key)
            refuse_truncate(db, table)
            name = capture_name(url, table)
            if db.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone():
                return
            db.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(name), sql.Identifier(table)
                )
            )
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    except psycopg.Error as exc:
        raise CaptureError(f"postgres source for table {table!r}: {exc}") from exc


def _check_identity(db: psycopg.Connection[Any], table: str, key: str) -> None:
    """The key must be in the replica identity: a delete sends only that of the old row (and a
    table without one would refuse its writers' deletes once published)."""
    identity, names = db.execute(
        "SELECT c.relreplident, array(SELECT a.attname::text FROM pg_index i JOIN pg_attribute a"
        " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = c.oid"
        " AND CASE c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident"
        " ELSE false END) FROM pg_class c WHERE c.oid = to_regclass(%s)",
        (sql.Identifier(table).as_string(db),),
    ).fetchone() or ("n", [])
    if identity == "f" or key in names:
        return
    raise ValueError(
        f"postgres source: table {table!r}'s replica identity does not hold the key {key!r}"
        f" (it holds {sorted(names)}): deletes would not name it. Make {key!r} the primary key,"
        f' or ALTER TABLE {table} REPLICA IDENTITY FULL, or capture = "trigger"'
    )


def drop_logical(db: psycopg.Connection[Any], url: str, table: str) -> None:
    """Stop capturing ``table`` by logical decoding: its slot (which keeps WAL) and its
    publication go."""
    name = capture_name(url, table)
    drop_slot(db, url, name)
    db.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
    db.execute(TABLES)
    db.execute("DELETE FROM fanout_changes WHERE starts_with(source, %s)", (f"{table}@",))


def drop_slot(db: psycopg.Connection[Any], url: str, name: str) -> None:
    """Drop slot ``name`` if it exists, ending the stream that holds it if one does (its
    reader then finds the slot gone, or made again, and says so: rule 4)."""
    db.execute(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
        " WHERE slot_name = %s AND active_pid IS NOT NULL",
        (name,),
    )
    found = db.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,))
    if found.fetchone() is not None:
        with psycopg.connect(url, autocommit=True, replication="database") as replication:
            replication.execute(  # WAIT: until the ended stream has let go of it
                sql.SQL("DROP_REPLICATION_SLOT {} WAIT").format(sql.Identifier(name))
            )


@dataclass(frozen=True)
class Offset:
    """Where a logical stream is (rule 3): the slot's start (its snapshot's name), the
    snapshot's size, the last change's ``_version`` and the last transaction's end."""

    slot: int
    snapshot: int
    id: int
    lsn: int

    @classmethod
    def of(cls, table: str, offset: Mapping[str, Any]) -> Offset:
        """Raises: CaptureError: the offset is a trigger stream's."""
        if "lsn" not in offset:
            raise CaptureError(
                f'table {table!r}: the stream was started with capture = "trigger" and is'
                " now read by logical decoding; start a new stream (a new state directory) or"
                " capture it as before"
            )
        lsn_of = pgoutput.lsn_of
        return cls(
            lsn_of(offset["slot"]),
            int(offset["snapshot"]),
            int(offset["id"]),
            lsn_of(offset["lsn"]),
        )

    def spelled(self) -> dict[str, Any]:
        """As Spark keeps it (JSON)."""
        text = pgoutput.lsn_text
        return {
            "slot": text(self.slot),
            "snapshot": self.snapshot,
            "id": self.id,
            "lsn": text(self.lsn),
        }


class LogicalStreamReader(ConnectedReader):
    """Reads one table's changes from its slot's stream, on the driver (rules 2-4)."""

    #: The slot's stream, opened at the first read of changes.
    _stream: SlotStream | None = None
    #: The position this reader last confirmed (the slot's, when the stream opened).
    _confirmed_at = 0
    #: The snapshot's rows trimmed so far (``commit``).
    _trimmed = 0
    _anchored = _tail_waits = 0  # the last anchor kept (rule 5); a waiting tail's start

    @property
    def name(self) -> str:
        return capture_name(self.options.url, self.options.table)

    def __getstate__(self) -> dict[str, Any]:
        # A stream cannot travel either; whoever unpickles opens it again.
        return {**super().__getstate__(), "_stream": None}

    def connected(self, db: psycopg.Connection[Any]) -> None:
        for name, value in SETTINGS.items():
            db.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))

    def stop(self) -> None:
        """The stream stopped: close the slot's stream and the connection."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        super().stop()

    def initialOffset(self) -> dict[str, Any]:
        """(Re)create the slot and copy the table's rows under its snapshot (rule 2); once per
        reader (Spark asks again before running the first micro-batch)."""
        if self.initial is None:
            self.initial = self._retrying(self._snapshot).spelled()
        return self.initial

    def _snapshot(self, db: psycopg.Connection[Any]) -> Offset:
        table, url = self.options.table, self.options.url
        db.execute(TABLES)
        drop_slot(db, url, self.name)
        db.execute("DELETE FROM fanout_changes WHERE starts_with(source, %s)", (f"{table}@",))
        with psycopg.connect(url, autocommit=True, replication="database") as replication:
            created = replication.execute(
                sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput EXPORT_SNAPSHOT").format(
                    sql.Identifier(self.name)
                )
            ).fetchone()
            assert created is not None
            start = pgoutput.lsn_of(created[1])
            db.execute(  # which stream the slot is now (rule 4)
                "INSERT INTO fanout_changes VALUES (%s, 0, 'S', to_jsonb(%s::text))",
                (slot_source(table), pgoutput.lsn_text(start)),
            )
            with psycopg.connect(url) as copy:
                copy.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                copy.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(created[2]))
                copied = copy.execute(
                    sql.SQL(
                        "INSERT INTO fanout_changes SELECT %s, row_number() OVER (), 'U',"
                        " to_jsonb(t) FROM {} t"
                    ).format(sql.Identifier(table)),
                    (_snapshot_source(table, start),),
                ).rowcount
        keep_anchor(db, table, start, start, copied)
        return Offset(start, copied, 0, start)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, Any]]:
        """The snapshot's next rows, or the changes of the transactions after ``start``: at
        most ``max_rows_per_batch`` of them, unless one transaction holds more."""
        at = Offset.of(self.options.table, start)
        if at.id < at.snapshot:
            upto = min(at.snapshot, at.id + self.options.max_rows_per_batch)
            rows = self._copied(at, upto)
            return self._batches(rows), Offset(at.slot, at.snapshot, upto, at.lsn).spelled()
        wanted, pending = self.options.max_rows_per_batch, pgoutput.Pending(at.lsn)

        def enough(held: list[pgoutput.Transaction]) -> bool:
            return pending.changes(held) >= wanted

        caught_up, held = self._stream_caught_up(at, None, enough, CATCH_UP)
        taken = pgoutput.after(held, at.lsn, wanted)
        if not taken and caught_up:
            self._confirm_quietly(at)
            self._anchor_quietly(at)
        rows = self._rows(taken, at.id)
        end = Offset(at.slot, at.snapshot, at.id + len(rows), taken[-1].end_lsn) if taken else at
        self._anchor(end)
        return self._batches(rows), end.spelled()

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """The rows in ``(start, end]`` again, identical to the first read (rule 4)."""
        at, upto = Offset.of(self.options.table, start), Offset.of(self.options.table, end)
        if at.id < at.snapshot:
            return self._batches(self._copied(at, upto.id))

        def enough(held: list[pgoutput.Transaction]) -> bool:
            return any(t.end_lsn >= upto.lsn for t in held)

        _, held = self._stream_caught_up(at, upto.lsn, enough, RECONNECT_FOR)
        rows = self._rows([t for t in held if at.lsn < t.end_lsn <= upto.lsn], at.id)
        if len(rows) != upto.id - at.id:
            raise CaptureError(
                f"table {self.options.table!r}: the slot holds {len(rows)} changes between"
                f" {start} and {end}, not {upto.id - at.id}: they are no longer all there"
            )
        return self._batches(rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: trim the snapshot, confirm the slot."""
        upto = Offset.of(self.options.table, end)
        trim = min(upto.id, upto.snapshot)
        if trim > self._trimmed:
            self._retrying(
                lambda db: db.execute(
                    "DELETE FROM fanout_changes WHERE source = %s AND id <= %s",
                    (_snapshot_source(self.options.table, upto.slot), trim),
                )
            )
            self._trimmed = trim
        self._confirm(upto.lsn)

    def _anchor_quietly(self, at: Offset) -> None:
        """Nothing of the table's ends after ``at`` up to where the stream is: keep that
        position as the anchor if a tail waits for one past its start (rule 5)."""
        stream = self._stream
        if stream is None or stream.sent <= at.lsn or self._tail_waits <= self._anchored:
            return
        if not any(t.end_lsn > at.lsn for t in stream.held):
            self._anchor(Offset(at.slot, at.snapshot, at.id, stream.sent))

    def _anchor(self, at: Offset) -> None:
        """Keep ``at`` as the table's anchor (rule 5), if it is further than the last."""
        if at.lsn > self._anchored:
            self._retrying(lambda db: keep_anchor(db, self.options.table, at.slot, at.lsn, at.id))
            self._anchored = at.lsn

    def _confirm(self, lsn: int) -> None:
        """Confirm the slot at ``lsn``: on its stream, or (none open) by the slot function."""
        if lsn <= self._confirmed_at:
            return
        if self._stream is not None and self._stream.open:
            try:
                self._stream.confirm(lsn)
            except psycopg2.Error as exc:  # the next read opens it again and confirms then
                log.warning("table %s: confirming %s: %s", self.options.table, lsn, exc)
                self._stream.close()
                return
        else:
            try:
                self._retrying(
                    lambda db: db.execute(
                        "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                        (self.name, pgoutput.lsn_text(lsn)),
                    )
                )
            except psycopg.errors.ObjectInUse as exc:  # an earlier stream's, going: next time
                log.warning("table %s: confirming %s: %s", self.options.table, lsn, exc)
                return
        self._confirmed_at = lsn

    def _confirm_quietly(self, at: Offset) -> None:
        """Nothing of the table's committed after ``at`` up to where the stream is: if Spark
        committed everything up to ``at``, confirm that position too, so that the slot of a
        quiet table on a busy server keeps no WAL. Safe: every transaction of the table
        ending before it has been read (the stream sent it) and committed by Spark."""
        stream = self._stream
        if stream is None or self._confirmed_at < at.lsn or stream.sent <= at.lsn:
            return
        if not any(t.end_lsn > at.lsn for t in stream.held):
            self._confirm(stream.sent)

    def _stream_caught_up(
        self, at: Offset, upto: int | None, enough: Enough, timeout: float
    ) -> tuple[bool, list[pgoutput.Transaction]]:
        """The transactions the slot's stream holds once caught up with ``upto`` (None: the
        WAL flushed now), or ``enough``, or after ``timeout`` s; and whether it caught up.
        The stream is opened (again) as needed, while the database is away for at most
        ``RECONNECT_FOR`` s.

        Raises:
            CaptureError: the slot is gone or another stream's (rule 4), the stream stayed
                unreachable, or it sent what is not pgoutput.
        """
        if upto is None:
            flushed = self._retrying(lambda db: flushed_and_waited(db, self.options.table))
            upto, self._tail_waits = flushed
        deadline, delay = time.monotonic() + RECONNECT_FOR, 0.1
        while True:
            stream = self._stream
            try:
                if stream is None or not stream.open:
                    stream = self._open_stream(at)
                return stream.catch_up(upto, enough, timeout), stream.held
            except pgoutput.DecodeError as exc:
                raise CaptureError(f"table {self.options.table!r}: the slot sent {exc}") from exc
            except psycopg2.Error as exc:
                if stream is not None:
                    stream.close()
                if time.monotonic() + delay > deadline:
                    raise CaptureError(
                        f"table {self.options.table!r}: the slot's stream stayed unreachable"
                        f" for {RECONNECT_FOR:g} s: {str(exc).strip()}"
                    ) from exc
                if not in_use(exc):  # in use: the previous stream's connection is going
                    log.warning(
                        "table %s: the slot's stream: %s; opening it again in %.1f s",
                        self.options.table,
                        str(exc).strip(),
                        delay,
                    )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _open_stream(self, at: Offset) -> SlotStream:
        """The slot's stream, from its confirmed position, once the slot is this stream's."""
        confirmed = self._retrying(lambda db: self._confirmed(db, at))
        stream = self._stream = SlotStream(self.options.url, self.name, self.name, SESSION)
        stream.start()
        self._confirmed_at = confirmed
        return stream

    def _confirmed(self, db: psycopg.Connection[Any], at: Offset) -> int:
        """The slot's confirmed position.

        Raises:
            CaptureError: the slot is gone, or another stream made it again (rule 4).
        """
        found = db.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (self.name,),
        ).fetchone()
        if found is None:
            raise CaptureError(
                f"table {self.options.table!r}: its replication slot {self.name!r} is gone"
                " (dropped, invalidated by max_slot_wal_keep_size, or the database restored"
                " from a copy?); start a new stream (a new state directory)"
            )
        (made,) = db.execute(
            "SELECT data #>> '{}' FROM fanout_changes WHERE source = %s AND id = 0",
            (slot_source(self.options.table),),
        ).fetchone() or (None,)
        if made != pgoutput.lsn_text(at.slot):
            raise CaptureError(
                f"table {self.options.table!r}: its slot was made again at {made}, by another"
                f" stream (this one's started at {pgoutput.lsn_text(at.slot)}): the changes"
                " between are gone; start a new stream (a new state directory)"
            )
        return pgoutput.lsn_of(found[0])

    def _copied(self, at: Offset, upto: int) -> list[Row]:
        """The snapshot's rows ``at.id < id <= upto``; refused unless all are there."""
        source = _snapshot_source(self.options.table, at.slot)
        rows: list[tuple[int, dict[str, Any]]] = self._retrying(
            lambda db: db.execute(
                "SELECT id, data FROM fanout_changes WHERE source = %s AND id > %s"
                " AND id <= %s ORDER BY id",
                (source, at.id, upto),
            ).fetchall()
        )
        if len(rows) != upto - at.id:
            raise CaptureError(
                f"table {self.options.table!r}: the snapshot's rows {at.id + 1}..{upto} are no"
                " longer all there (another stream took a snapshot of the table?)"
            )
        return [(version, False, data) for version, data in rows]

    def _rows(self, taken: list[pgoutput.Transaction], after: int) -> list[Row]:
        """The changes of ``taken``, numbered from ``after + 1`` (rule 3)."""
        values = LoadedValues(Transformer.from_context(self.db))
        rows: list[Row] = []
        for transaction in taken:
            for deleted, data in changes_of(transaction, values, self.options):
                rows.append((after + len(rows) + 1, deleted, data))
        return rows


def changes_of(
    transaction: pgoutput.Transaction, values: LoadedValues, options: ReaderOptions
) -> list[tuple[bool, dict[str, Any]]]:
    """``(deleted, values)`` of a transaction's changes of the table, in order (a key change: a
    delete, then an upsert; rule 3 of ``sources.postgres``).

    Raises:
        CaptureError: the table was truncated.
    """
    rows: list[tuple[bool, dict[str, Any]]] = []
    for change in transaction.changes:
        if isinstance(change, pgoutput.Truncate):
            raise CaptureError(
                f"table {options.table!r} was truncated (its trigger refusing TRUNCATE"
                " dropped?): its rows vanished unseen; start a new stream"
            )
        relation = transaction.relations[change.relation]
        rows += values.changes(relation, change, options.key)
    return rows


def _snapshot_source(table: str, slot: int) -> str:
    """``fanout_changes.source`` of a stream's snapshot: the table and where its slot starts
    (a later stream's snapshot is another)."""
    return f"{table}@{pgoutput.lsn_text(slot)}"
