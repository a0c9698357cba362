"""The ``postgres`` source: a PostgreSQL table's rows and every change to them (Liebig et al.: the
DB connector), read as a Spark stream (docs/configuration.md, "Sources"). Rules:

1. **Capture.** ``install`` adds, idempotently, ``fanout_clock``, ``fanout_changes``,
   ``fanout_capture()`` and the table's row trigger, and refuses ``TRUNCATE``.
2. **Commit order, no gaps.** Each change's id comes from the table's clock row, locked until
   its transaction ends: ids in commit order, without holes.
3. **Snapshot.** A new stream copies the table's rows into the changes as upserts, under that
   lock, and starts just before them.
4. **Driver-side, exactly once, trimmed**, as the ``ingest`` source; a range no longer there is
   refused, never skipped.
5. **Keys.** A delete carries the old row; a key change is a delete and an upsert.
   ``_version`` is the change's id.
6. **A database away** is reconnected to, with backoff, for ``RECONNECT_FOR`` seconds.
7. **Values that do not fit are refused, not fatal** (``sources.fitting``, ``sources.refusals``);
   a delete never is.

One stream per captured table.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
import pyspark.sql.functions as sf
from psycopg import sql
from psycopg.types.json import set_json_loads
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from fanout.errors import FanoutError
from fanout.publisher.datasets import (
    DELETED,
    VERSION,
    ColumnType,
    Dataset,
    PostgresSource,
    decimal_of,
)
from fanout.publisher.sources.fitting import Unfit, stored, unfit
from fanout.publisher.sources.options import lowered, max_rows
from fanout.publisher.sources.refusals import POSTGRES_PREFIX, drop_refused, refusals

log = logging.getLogger(__name__)
T = TypeVar("T")

SOURCE_NAME = "fanout_postgres"
#: The reader's column naming why a change is refused (rule 7; null: it is not).
PROBLEM = "_problem"
#: Characters of a refused change's problem logged at most.
SAMPLE_CHARS = 300
#: Seconds a reader keeps connecting again to a database that went away (rule 6).
RECONNECT_FOR = 30.0
#: Changes per micro-batch at most (admission control).
DEFAULT_MAX_ROWS_PER_BATCH = 100_000

INSTALL = """
CREATE TABLE IF NOT EXISTS fanout_clock (source text PRIMARY KEY, n bigint NOT NULL);
CREATE TABLE IF NOT EXISTS fanout_changes (
    source text NOT NULL,
    id bigint NOT NULL,
    op char(1) NOT NULL,
    data jsonb NOT NULL,
    PRIMARY KEY (source, id)
);
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
CREATE OR REPLACE FUNCTION fanout_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fanout captures the changes of table %: delete its rows instead of TRUNCATE',
        TG_TABLE_NAME;
END $$;
"""


class CaptureError(FanoutError):
    """The database cannot be captured as declared, or a stream's changes are gone."""

    code = "config"


@dataclass(frozen=True)
class ReaderOptions:
    """The options of the ``fanout_postgres`` source (Spark passes them as strings)."""

    url: str
    table: str
    schema: str
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
    #: The dataset's key column, named with a refused change (rule 7); None: the change's id.
    key: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReaderOptions:
        """Parse Spark's options (``url``, ``table``, ``schema``, ``maxRowsPerBatch``, ``key``).

        Raises:
            ConfigError: an option is missing or malformed.
        """
        found = lowered(options, SOURCE_NAME, ("url", "table", "schema"))
        rows = max_rows(found, SOURCE_NAME, DEFAULT_MAX_ROWS_PER_BATCH)
        return cls(found["url"], found["table"], found["schema"], rows, found.get("key"))


#: fanout column type -> the PostgreSQL types (``information_schema`` spelling) that read as it.
READS_AS: dict[str, frozenset[str]] = {
    "long": frozenset({"bigint", "integer", "smallint"}),
    "int": frozenset({"integer", "smallint"}),
    "double": frozenset({"double precision", "real", "numeric", "bigint", "integer", "smallint"}),
    "float": frozenset({"real", "double precision", "numeric", "bigint", "integer", "smallint"}),
    "string": frozenset({"text", "character varying", "character"}),
    "boolean": frozenset({"boolean"}),
    "timestamp": frozenset({"timestamp with time zone"}),
    "date": frozenset({"date"}),
    "bytes": frozenset({"bytea"}),
}


def reads_as(kind: str) -> frozenset[str]:
    """The PostgreSQL types that read as the column type ``kind`` (``decimal(p,s)``: numeric,
    whose values must fit it)."""
    return frozenset({"numeric"}) if decimal_of(kind) else READS_AS[kind]


def install(url: str, table: str, key: str, columns: Mapping[str, str]) -> None:
    """Capture ``table``'s changes (rule 1); checks that it has the dataset's columns, of types
    that read as the declared ones (``READS_AS``).

    Raises:
        CaptureError: the database cannot be reached, or the table lacks a column or has one
            of another type.
    """
    try:
        with psycopg.connect(url) as db:
            found: dict[str, str] = dict(
                db.execute(
                    "SELECT column_name, data_type FROM information_schema.columns"
                    " WHERE table_name = %s",
                    (table,),
                ).fetchall()
            )
            if not found:
                raise CaptureError(f"postgres source: the database has no table {table!r}")
            for column, kind in columns.items():
                if column not in found:
                    raise CaptureError(
                        f"postgres source: table {table!r} has no column {column!r}"
                        f" (it has {sorted(found)})"
                    )
                if found[column] not in reads_as(kind):
                    raise CaptureError(
                        f"postgres source: column {column!r} of table {table!r} is"
                        f" {found[column]}, which does not read as the dataset's {kind}"
                        f" (it takes {', '.join(sorted(reads_as(kind)))})"
                    )
            db.execute(INSTALL)
            name = sql.Identifier(table)
            capture = sql.Identifier(f"fanout_capture_{table}")
            truncate = sql.Identifier(f"fanout_refuse_truncate_{table}")
            db.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(capture, name))
            db.execute(
                sql.SQL(
                    "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {}"
                    " FOR EACH ROW EXECUTE FUNCTION fanout_capture({})"
                ).format(capture, name, sql.Literal(key))
            )
            db.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(truncate, name))
            db.execute(
                sql.SQL(
                    "CREATE TRIGGER {} BEFORE TRUNCATE ON {}"
                    " FOR EACH STATEMENT EXECUTE FUNCTION fanout_refuse_truncate()"
                ).format(truncate, name)
            )
            db.execute("INSERT INTO fanout_clock VALUES (%s, 0) ON CONFLICT DO NOTHING", (table,))
    except psycopg.Error as exc:
        raise CaptureError(f"postgres source for table {table!r}: {exc}") from exc


class PostgresStreamReader(SimpleDataSourceStreamReader):
    """Reads one captured table's changes on the driver (rules 2-6)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._db: psycopg.Connection[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A connection cannot travel; whoever unpickles connects again.
        return {**self.__dict__, "_db": None}

    @property
    def db(self) -> psycopg.Connection[Any]:
        """The connection, opened on first use (in the process Spark runs this reader in)."""
        if self._db is None or self._db.closed:
            self._db = psycopg.connect(self.options.url, autocommit=True)
            # jsonb numbers as Decimal: a numeric column's value stays exact (``_batches``).
            set_json_loads(_exact_json, self._db)
        return self._db

    def _retrying(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work(connection)``, connecting again while the database is away (rule 6).

        Raises:
            CaptureError: the database stayed away for ``RECONNECT_FOR`` seconds.
        """
        deadline, delay = time.monotonic() + RECONNECT_FOR, 0.1
        while True:
            try:
                return work(self.db)
            except psycopg.OperationalError as exc:
                self.stop()
                if time.monotonic() + delay > deadline:
                    raise CaptureError(
                        f"table {self.options.table!r}: the database stayed unreachable for"
                        f" {RECONNECT_FOR:g} s: {exc}"
                    ) from exc
                log.warning(
                    "table %s: %s; connecting again in %.1f s", self.options.table, exc, delay
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def initialOffset(self) -> dict[str, Any]:
        """Copy the table's rows into its changes and start just before them (rule 3)."""
        return self._retrying(self._snapshot)

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
        after = int(start["id"])
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
        after, upto = int(start["id"]), int(end["id"])
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

    def stop(self) -> None:
        """The stream stopped: close the connection."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def _changes(self, after: int, upto: int) -> list[tuple[int, str, dict[str, Any]]]:
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
        return rows

    def _batches(self, rows: list[tuple[int, str, dict[str, Any]]]) -> Iterator[pa.RecordBatch]:
        # A list iterator, not a generator: Spark's prefetch cache copies the iterator.
        if not rows:
            return iter([])
        declared = [
            (f.name, column_kind(f.type), f.type)
            for f in self.arrow_schema
            if f.name not in (VERSION, DELETED, PROBLEM)
        ]
        columns: dict[str, list[Any]] = {f.name: [] for f in self.arrow_schema}
        for change_id, op, data in rows:
            values, problem = self._fitted(change_id, op == "D", data, declared)
            for name, value in values.items():
                columns[name].append(value)
            columns[VERSION].append(change_id)
            columns[DELETED].append(op == "D")
            columns[PROBLEM].append(problem)
        table = pa.table(
            {f.name: pa.array(columns[f.name], type=f.type) for f in self.arrow_schema},
            schema=self.arrow_schema,
        )
        return iter(table.to_batches())

    def _fitted(
        self,
        change_id: int,
        deleted: bool,
        data: dict[str, Any],
        declared: list[tuple[str, ColumnType, pa.DataType]],
    ) -> tuple[dict[str, Any], str | None]:
        """One change's values as Arrow takes them, and its problem if it is refused (rule 7).

        A delete is never refused: only its key matters, so a value that does not fit is
        NULL in it. A refused upsert keeps only its key (the row is dropped before the state).
        """
        values: dict[str, Any] = {}
        for name, column, arrow in declared:
            try:
                values[name] = _from_json(name, data.get(name), column, arrow)
            except Unfit as exc:
                if deleted:
                    values[name] = None
                    continue
                key = self.options.key
                where = f"table {self.options.table!r}"
                if key is not None:
                    where += f", key {data.get(key)!r}"
                problem = f"{where}, change {change_id}: {exc}"
                kept = {name: data.get(name) if name == key else None for name, _, _ in declared}
                return kept, problem
        return values, None


def _exact_json(text: str | bytes) -> Any:
    return json.loads(text, parse_float=decimal.Decimal)


def _from_json(name: str, value: Any, column: ColumnType, kind: pa.DataType) -> Any:
    """A value as ``to_jsonb`` spelled it, as a Python value of column ``name``'s Arrow type
    ``kind`` (of column type ``column``).

    Raises:
        Unfit: it does not fit the column's type (``sources.fitting``).
    """
    if value is None:
        return None
    if pa.types.is_floating(kind):  # numbers come as Decimal; NaN and infinities as text
        number = float(value)
        if isinstance(value, decimal.Decimal) and value.is_finite() and not math.isfinite(number):
            raise unfit(name, column, value)  # beyond the range of a double
        value = number
    elif column in _TEXT:  # timestamps, dates and bytes are spelled as text
        value = _parsed(name, column, value, _TEXT[column])
    kept = stored(name, column, value)
    return decimal.Decimal(kept) if pa.types.is_decimal(kind) else kept  # exact text


def _parsed(name: str, column: str, value: Any, parse: Callable[[str], Any]) -> Any:
    """``parse(value)``; text PostgreSQL holds but Python cannot (``infinity``, a year past
    9999 or before 1, ...) does not fit."""
    try:
        return parse(value)
    except (TypeError, ValueError):
        raise unfit(name, column, value) from None


def bytea(text: str) -> bytes:
    """A ``bytea`` value as PostgreSQL spells it in text (and ``to_jsonb``): hex (``\\x0a1b``),
    or the escape format (``bytea_output = escape``: ``\\ooo`` octal, ``\\\\``, the rest as is).

    Raises:
        ValueError: it is neither.
    """
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    out = bytearray()
    at = 0
    while at < len(text):
        if text[at] != "\\":
            out += text[at].encode("latin-1")
            at += 1
        elif text[at + 1 : at + 2] == "\\":
            out.append(0x5C)
            at += 2
        else:
            out.append(int(text[at + 1 : at + 4], 8))
            at += 4
    return bytes(out)


_TEXT: dict[ColumnType, Callable[[str], Any]] = {
    # ISO 8601 with the session's offset: an instant
    "timestamp": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "bytes": bytea,
}


def column_kind(kind: pa.DataType) -> ColumnType:
    """The fanout column type of a column read as Arrow type ``kind``."""
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    for name, arrow in _KINDS.items():
        if kind == arrow:
            return name
    if pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_large_binary(kind):
        return "bytes"
    raise ValueError(f"no column type reads as {kind}")


_KINDS: dict[ColumnType, pa.DataType] = {
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "string": pa.string(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "bytes": pa.binary(),
}


class PostgresDataSource(DataSource):
    """``spark.readStream.format("fanout_postgres")`` with :class:`ReaderOptions` options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        declared = ReaderOptions.from_options(self.options).schema
        return f"{declared}, `{VERSION}` bigint, `{DELETED}` boolean, `{PROBLEM}` string"

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return PostgresStreamReader(ReaderOptions.from_options(self.options), schema)


def postgres_stream(
    spark: SparkSession, dataset: Dataset, *, max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
) -> DataFrame:
    """A captured table's rows, then its changes, as a stream of the dataset's columns,
    ``_version`` and ``_deleted``; installs the capture first (``install``).

    Raises:
        CaptureError: the table cannot be captured (see ``install``).
    """
    source = dataset.source
    assert isinstance(source, PostgresSource)
    table = source.table or dataset.name
    install(source.url, table, dataset.key, dataset.schema)
    spark.dataSource.register(PostgresDataSource)
    options = {
        "url": source.url,
        "table": table,
        "schema": dataset.spark_schema(),
        "maxRowsPerBatch": str(max_rows_per_batch),
        "key": dataset.key,
    }
    refusals(spark)
    changes = spark.readStream.format(SOURCE_NAME).options(**options).load()
    refused = drop_refused(
        changes,
        POSTGRES_PREFIX + dataset.name,
        sf.col(PROBLEM),
        sf.substring(sf.col(PROBLEM), 1, SAMPLE_CHARS),
        sf.col(VERSION),
    )
    return refused.drop(PROBLEM)
