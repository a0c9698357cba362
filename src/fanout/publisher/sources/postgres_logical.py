"""Change capture by logical decoding (``sources.postgres``, ``capture = "logical"``): the
table's changes read from a logical replication slot with the built-in ``pgoutput`` plug-in,
through the slot functions (docs/configuration.md, "Capture by logical decoding"). Rules:

1. **Install** checks ``wal_level = logical``, the role's ``REPLICATION`` and the key in the
   replica identity, then creates the publication and refuses ``TRUNCATE``; no row trigger.
2. **Snapshot.** A new stream (re)creates the slot, whose exported snapshot the table's rows
   are copied under: every change after them is in the slot, none before.
3. **Offsets** name the last transaction read (its commit's end ``lsn``) and the last
   ``_version``; a read peeks whole transactions, in commit order, after ``lsn``.
4. **Confirmed only when durable.** ``commit`` advances the slot (and trims the snapshot) once
   Spark committed the micro-batch; a quiet table's slot is moved past the WAL it decoded; a
   slot gone or taken by another stream is refused, never skipped.
"""

from __future__ import annotations

import decimal
import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import abc, sql
from psycopg.adapt import Transformer
from psycopg.pq import Format

from fanout.publisher.sources import pgoutput
from fanout.publisher.sources.postgres_reader import (
    TABLES,
    CaptureError,
    ConnectedReader,
    refuse_truncate,
)
from fanout.publisher.sources.postgres_values import Row, Unreadable, check_columns

#: Session settings of the reader: the server's output functions spell values in them.
SESSION = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET bytea_output = 'hex'"
#: The slot's text spelling of a TOASTed value an update left unchanged (not sent).
UNCHANGED_TEXT = "a TOASTed value the update left unchanged (REPLICA IDENTITY FULL sends it)"


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
    db.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (name,),
    )
    db.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))
    db.execute(TABLES)
    db.execute("DELETE FROM fanout_changes WHERE starts_with(source, %s)", (f"{table}@",))


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
    """Reads one table's changes from its slot, on the driver (rules 2-4)."""

    @property
    def name(self) -> str:
        return capture_name(self.options.url, self.options.table)

    def connected(self, db: psycopg.Connection[Any]) -> None:
        db.execute(SESSION)

    def initialOffset(self) -> dict[str, Any]:
        """(Re)create the slot and copy the table's rows under its snapshot (rule 2); once per
        reader (Spark asks again before running the first micro-batch)."""
        if self.initial is None:
            self.initial = self._retrying(self._snapshot).spelled()
        return self.initial

    def _snapshot(self, db: psycopg.Connection[Any]) -> Offset:
        table, url = self.options.table, self.options.url
        db.execute(TABLES)
        db.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (self.name,),
        )
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
                (_slot_source(table), pgoutput.lsn_text(start)),
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
        return Offset(start, copied, 0, start)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, Any]]:
        """The snapshot's next rows, or the changes of the transactions after ``start``: at
        most ``max_rows_per_batch`` of them, unless one transaction holds more."""
        at = Offset.of(self.options.table, start)
        if at.id < at.snapshot:
            upto = min(at.snapshot, at.id + self.options.max_rows_per_batch)
            rows = self._copied(at, upto)
            return self._batches(rows), Offset(at.slot, at.snapshot, upto, at.lsn).spelled()
        found, quiet = self._retrying(lambda db: self._transactions(db, at, None))
        taken = pgoutput.after(found, at.lsn, self.options.max_rows_per_batch)
        if not taken and quiet is not None:
            self._retrying(lambda db: self._advance_quietly(db, at, quiet))
        rows = self._rows(taken, at.id)
        end = Offset(at.slot, at.snapshot, at.id + len(rows), taken[-1].end_lsn) if taken else at
        return self._batches(rows), end.spelled()

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """The rows in ``(start, end]`` again, identical to the first read (rule 4)."""
        at, upto = Offset.of(self.options.table, start), Offset.of(self.options.table, end)
        if at.id < at.snapshot:
            return self._batches(self._copied(at, upto.id))
        found, _ = self._retrying(lambda db: self._transactions(db, at, upto.lsn))
        rows = self._rows([t for t in found if at.lsn < t.end_lsn <= upto.lsn], at.id)
        if len(rows) != upto.id - at.id:
            raise CaptureError(
                f"table {self.options.table!r}: the slot holds {len(rows)} changes between"
                f" {start} and {end}, not {upto.id - at.id}: they are no longer all there"
            )
        return self._batches(rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: trim the snapshot, advance the slot."""
        upto = Offset.of(self.options.table, end)

        def confirm(db: psycopg.Connection[Any]) -> None:
            db.execute(
                "DELETE FROM fanout_changes WHERE source = %s AND id <= %s",
                (_snapshot_source(self.options.table, upto.slot), upto.id),
            )
            if upto.lsn > self._confirmed(db, upto):
                db.execute(
                    "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                    (self.name, pgoutput.lsn_text(upto.lsn)),
                )

        self._retrying(confirm)

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
            (_slot_source(self.options.table),),
        ).fetchone() or (None,)
        if made != pgoutput.lsn_text(at.slot):
            raise CaptureError(
                f"table {self.options.table!r}: its slot was made again at {made}, by another"
                f" stream (this one's started at {pgoutput.lsn_text(at.slot)}): the changes"
                " between are gone; start a new stream (a new state directory)"
            )
        return pgoutput.lsn_of(found[0])

    def _transactions(
        self, db: psycopg.Connection[Any], at: Offset, upto: int | None
    ) -> tuple[list[pgoutput.Transaction], int | None]:
        """The slot's committed transactions: up to the one ending at ``upto``, or (None) as
        many as hold ``max_rows_per_batch`` changes after ``at`` (or all there are); and, when
        all there are were read, a WAL position they all end before."""
        self._confirmed(db, at)
        wanted = self.options.max_rows_per_batch
        limit = wanted + 3  # a transaction's Begin, Relation and Commit are rows too
        while True:
            (flushed,) = db.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone() or ("",)
            messages = db.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, %s,"
                " 'proto_version', '1', 'publication_names', %s)",
                (
                    self.name,
                    None if upto is None else pgoutput.lsn_text(upto),
                    None if upto is not None else limit,
                    self.name,
                ),
            ).fetchall()
            try:
                found = pgoutput.transactions(pgoutput.decode(bytes(m)) for (m,) in messages)
            except pgoutput.DecodeError as exc:
                raise CaptureError(f"table {self.options.table!r}: the slot sent {exc}") from exc
            if upto is not None:
                return found, None
            if len(messages) < limit:
                return found, pgoutput.lsn_of(flushed)
            if sum(len(t.changes) for t in found if t.end_lsn > at.lsn) >= wanted:
                return found, None
            limit *= 4  # the transactions read already, not yet committed, filled the peek

    def _advance_quietly(self, db: psycopg.Connection[Any], at: Offset, quiet: int) -> None:
        """Nothing of the table's committed after ``at`` up to ``quiet``: if Spark committed
        everything up to ``at`` (the slot is confirmed there or past it), confirm ``quiet``
        too, so that the slot of a quiet table on a busy server keeps neither WAL nor each
        read decoding it again. Safe: every transaction of the table ending at or before the
        confirmed position has been committed by Spark, before as after."""
        confirmed = self._confirmed(db, at)
        if confirmed >= at.lsn and quiet > confirmed:
            db.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.name, pgoutput.lsn_text(quiet)),
            )

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
        """The changes of ``taken``, numbered from ``after + 1`` (a key change: a delete, then
        an upsert; rule 3 of ``sources.postgres``)."""
        values = _Values(Transformer.from_context(self.db))
        rows: list[Row] = []
        for transaction in taken:
            for change in transaction.changes:
                if isinstance(change, pgoutput.Truncate):
                    raise CaptureError(
                        f"table {self.options.table!r} was truncated (its trigger refusing"
                        " TRUNCATE dropped?): its rows vanished unseen; start a new stream"
                    )
                relation = transaction.relations[change.relation]
                for deleted, data in values.changes(relation, change, self.options.key):
                    rows.append((after + len(rows) + 1, deleted, data))
        return rows


class _Values:
    """The text values the slot sent, loaded as psycopg loads a query's (rule 2 of
    ``sources.postgres_values``)."""

    def __init__(self, transformer: abc.Transformer) -> None:
        self.transformer = transformer
        self.loaders: dict[int, abc.Loader] = {}

    def changes(
        self,
        relation: pgoutput.Relation,
        change: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
        key: str | None,
    ) -> list[tuple[bool, dict[str, Any]]]:
        """``(deleted, values)`` of one change: an update of the key is a delete and an upsert."""
        match change:
            case pgoutput.Insert():
                return [(False, self.row(relation, change.new))]
            case pgoutput.Delete():
                return [(True, self.row(relation, change.old))]
            case pgoutput.Update():
                new = self.row(relation, change.new, change.old)
                if change.old is None:
                    return [(False, new)]
                old = self.row(relation, change.old)
                keys = [key] if key else [c.name for c in relation.columns if c.key]
                moved = any(old.get(name) != new.get(name) for name in keys)
                return [(True, old), (False, new)] if moved else [(False, new)]

    def row(
        self,
        relation: pgoutput.Relation,
        values: tuple[pgoutput.Value, ...],
        old: tuple[pgoutput.Value, ...] | None = None,
    ) -> dict[str, Any]:
        """A row's values by column name; an unchanged TOASTed value is the old row's, if sent."""
        row: dict[str, Any] = {}
        for at, (column, value) in enumerate(zip(relation.columns, values, strict=True)):
            sent = old[at] if value is pgoutput.UNCHANGED and old is not None else value
            row[column.name] = self.load(column.type_oid, sent)
        return row

    def load(self, oid: int, value: pgoutput.Value) -> Any:
        if value is None:
            return None
        if not isinstance(value, bytes):
            return Unreadable(UNCHANGED_TEXT)
        loader = self.loaders.get(oid)
        if loader is None:
            loader = self.loaders[oid] = self.transformer.get_loader(oid, Format.TEXT)
        try:
            loaded = loader.load(value)
        except (psycopg.DataError, ValueError, OverflowError):
            return Unreadable(value.decode(errors="replace"))
        if isinstance(loaded, decimal.Decimal) and not loaded.is_finite():
            return value.decode()  # as to_jsonb spells it: a refusal says the same either way
        return loaded


def _slot_source(table: str) -> str:
    """``fanout_changes.source`` of the row naming the stream the table's slot is now."""
    return f"{table}@slot"


def _snapshot_source(table: str, slot: int) -> str:
    """``fanout_changes.source`` of a stream's snapshot: the table and where its slot starts
    (a later stream's snapshot is another)."""
    return f"{table}@{pgoutput.lsn_text(slot)}"
