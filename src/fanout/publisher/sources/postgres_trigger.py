"""Change capture by a trigger (``sources.postgres``, ``capture = "trigger"``): every write to
the table also writes its change to ``fanout_changes``, numbered by the table's clock row.
Rules:

1. **Capture.** ``install_trigger`` adds, idempotently, ``fanout_clock``, ``fanout_changes``,
   ``fanout_capture()`` and the table's row trigger, and refuses ``TRUNCATE``.
2. **Commit order, no gaps.** Each change's id comes from the table's clock row, locked until
   its transaction ends: ids in commit order, without holes (writers to one table commit one
   at a time: the cost ``bench/postgres.py`` measures).
3. **Snapshot.** A new stream copies the table's rows into the changes as upserts, under that
   lock, and starts just before them.
4. **Driver-side, exactly once, trimmed**: an offset is a change's id; a change is deleted only
   once Spark committed the micro-batch that carries it; a range no longer there is refused,
   never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from fanout.publisher.sources.postgres_reader import (
    TABLES,
    CaptureError,
    ConnectedReader,
    refuse_truncate,
)
from fanout.publisher.sources.postgres_values import Row, check_columns

INSTALL = """
CREATE TABLE IF NOT EXISTS fanout_clock (source text PRIMARY KEY, n bigint NOT NULL);
CREATE OR REPLACE FUNCTION fanout_capture() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    key text := TG_ARGV[0];
    next bigint;
BEGIN
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND to_jsonb(OLD) -> key <> to_jsonb(NEW) -> key)
    THEN
        UPDATE fanout_clock SET n = n + 1 WHERE source = TG_TABLE_NAME RETURNING n INTO next;
        INSERT INTO fanout_changes VALUES (TG_TABLE_NAME, next, 'D', to_jsonb(OLD));
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE fanout_clock SET n = n + 1 WHERE source = TG_TABLE_NAME RETURNING n INTO next;
        INSERT INTO fanout_changes VALUES (TG_TABLE_NAME, next, 'U', to_jsonb(NEW));
    END IF;
    RETURN NULL;
END $$;
"""


def install_trigger(url: str, table: str, key: str, columns: Mapping[str, str]) -> None:
    """Capture ``table``'s changes by a trigger (rule 1); checks its columns first
    (``postgres_values.check_columns``).

    Raises:
        CaptureError: the database cannot be reached, or the table lacks a column or has one
            of another type.
    """
    try:
        with psycopg.connect(url) as db:
            check_columns(db, table, columns)
            db.execute(TABLES)
            db.execute(INSTALL)
            name = sql.Identifier(table)
            capture = sql.Identifier(f"fanout_capture_{table}")
            db.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(capture, name))
            db.execute(
                sql.SQL(
                    "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {}"
                    " FOR EACH ROW EXECUTE FUNCTION fanout_capture({})"
                ).format(capture, name, sql.Literal(key))
            )
            refuse_truncate(db, table)
            db.execute("INSERT INTO fanout_clock VALUES (%s, 0) ON CONFLICT DO NOTHING", (table,))
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    except psycopg.Error as exc:
        raise CaptureError(f"postgres source for table {table!r}: {exc}") from exc


def drop_trigger(db: psycopg.Connection[Any], table: str) -> None:
    """Stop capturing ``table`` by a trigger (its writers no longer pay for it)."""
    db.execute(TABLES)
    db.execute(
        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(
            sql.Identifier(f"fanout_capture_{table}"), sql.Identifier(table)
        )
    )
    db.execute("DELETE FROM fanout_changes WHERE source = %s", (table,))


def trigger_offset(table: str, offset: Mapping[str, Any]) -> int:
    """The change id of a trigger stream's offset.

    Raises:
        CaptureError: the offset is a logical decoding stream's.
    """
    if "lsn" in offset:
        raise CaptureError(
            f'table {table!r}: the stream was started with capture = "logical" and is now'
            " read by its trigger; start a new stream (a new state directory) or capture it"
            " as before"
        )
    return int(offset["id"])


class TriggerStreamReader(ConnectedReader):
    """Reads one table's changes the trigger captured, on the driver (rules 2-4)."""

    def initialOffset(self) -> dict[str, Any]:
        """Copy the table's rows into its changes and start just before them (rule 3); once
        per reader (Spark asks again before running the first micro-batch)."""
        if self.initial is None:
            self.initial = self._retrying(self._snapshot)
        return self.initial

    def _snapshot(self, db: psycopg.Connection[Any]) -> dict[str, Any]:
        table = self.options.table
        with db.transaction():
            (clock,) = db.execute(
                "SELECT n FROM fanout_clock WHERE source = %s FOR UPDATE", (table,)
            ).fetchone() or (None,)
            if clock is None:
                raise CaptureError(f"table {table!r} is not captured: the publisher installs it")
            db.execute("DELETE FROM fanout_changes WHERE source = %s", (table,))
            copied = db.execute(
                sql.SQL(
                    "INSERT INTO fanout_changes SELECT %s, %s + row_number() OVER (), 'U',"
                    " to_jsonb(t) FROM {} t"
                ).format(sql.Identifier(table)),
                (table, clock),
            ).rowcount
            db.execute("UPDATE fanout_clock SET n = n + %s WHERE source = %s", (copied, table))
        return {"id": int(clock)}

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, Any]]:
        """The changes after ``start``, at most ``max_rows_per_batch`` of them."""
        after = trigger_offset(self.options.table, start)
        rows = self._changes(after, after + self.options.max_rows_per_batch)
        if not rows:
            self._check_clock(after)
        end = rows[-1][0] if rows else after
        return self._batches(rows), {"id": end}

    def _check_clock(self, after: int) -> None:
        """Refuse a stream that read further than the table's changes go (rule 4)."""
        (clock,) = self._retrying(
            lambda db: db.execute(
                "SELECT n FROM fanout_clock WHERE source = %s", (self.options.table,)
            ).fetchone()
        ) or (None,)
        if clock is None or clock < after:
            raise CaptureError(
                f"table {self.options.table!r}: the stream read up to change {after}, but the"
                f" table's changes end at {clock} (the database restored from an older copy,"
                " or its capture dropped?); start a new stream (a new state directory)"
            )

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """The changes in ``(start, end]`` again, identical to the first read."""
        after = trigger_offset(self.options.table, start)
        upto = trigger_offset(self.options.table, end)
        rows = self._changes(after, upto)
        if len(rows) != upto - after:
            raise CaptureError(
                f"table {self.options.table!r}: changes {after + 1}..{upto} are no longer all"
                " there (another stream took a snapshot of the table?)"
            )
        return self._batches(rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: delete those changes."""
        self._retrying(
            lambda db: db.execute(
                "DELETE FROM fanout_changes WHERE source = %s AND id <= %s",
                (self.options.table, int(end["id"])),
            )
        )

    def _changes(self, after: int, upto: int) -> list[Row]:
        """Changes ``after < id <= upto``, in order; refused if one before them is gone."""
        rows: list[tuple[int, str, dict[str, Any]]] = self._retrying(
            lambda db: db.execute(
                "SELECT id, op, data FROM fanout_changes WHERE source = %s AND id > %s"
                " AND id <= %s ORDER BY id",
                (self.options.table, after, upto),
            ).fetchall()
        )
        if rows and rows[0][0] != after + 1:
            raise CaptureError(
                f"table {self.options.table!r}: the stream read up to change {after}, but the"
                f" next one there is {rows[0][0]} (another stream took a snapshot of the table?)"
            )
        return [(change_id, op == "D", data) for change_id, op, data in rows]
