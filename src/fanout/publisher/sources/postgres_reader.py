"""What the ``postgres`` source's two captures share (``sources.postgres``): their options,
their error, the tables they keep, and a connection made again while the database is away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import set_json_loads
from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from fanout.errors import ConfigError, FanoutError
from fanout.publisher.sources.options import lowered, max_rows
from fanout.publisher.sources.postgres_values import Row, exact_json, to_batches

log = logging.getLogger(__name__)
T = TypeVar("T")

SOURCE_NAME = "fanout_postgres"
#: Seconds a reader keeps connecting again to a database that went away
#: (``sources.postgres`` rule 5).
RECONNECT_FOR = 30.0
#: Changes per micro-batch at most (admission control).
DEFAULT_MAX_ROWS_PER_BATCH = 100_000

#: How a table's changes are captured: a logical replication slot, or a trigger.
Capture = Literal["logical", "trigger"]
CAPTURES: tuple[Capture, ...] = ("logical", "trigger")


#: What both captures keep in the database: a new stream's snapshot (and a trigger's changes),
#: and the function that refuses ``TRUNCATE`` (no row may vanish unseen).
TABLES = """
CREATE TABLE IF NOT EXISTS fanout_changes (
    source text NOT NULL,
    id bigint NOT NULL,
    op char(1) NOT NULL,
    data jsonb NOT NULL,
    PRIMARY KEY (source, id)
);
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
    #: The dataset's key column, named with a refused change (``sources.postgres`` rule 5);
    #: None: the change's id.
    key: str | None = None
    capture: Capture = "trigger"

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReaderOptions:
        """Parse Spark's options (``url``, ``table``, ``schema``, ``maxRowsPerBatch``, ``key``,
        ``capture``).

        Raises:
            ConfigError: an option is missing or malformed.
        """
        found = lowered(options, SOURCE_NAME, ("url", "table", "schema"))
        rows = max_rows(found, SOURCE_NAME, DEFAULT_MAX_ROWS_PER_BATCH)
        capture = found.get("capture", "trigger")
        if capture not in CAPTURES:
            raise ConfigError(f"{SOURCE_NAME}: capture={capture!r}: expected one of {CAPTURES}")
        return cls(found["url"], found["table"], found["schema"], rows, found.get("key"), capture)


class ConnectedReader(SimpleDataSourceStreamReader):
    """A stream reader with a connection of its own, opened on first use and made again
    while the database is away (``sources.postgres`` rule 5)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._db: psycopg.Connection[Any] | None = None
        #: The new stream's first offset, once taken (``initialOffset``).
        self.initial: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A connection cannot travel; whoever unpickles connects again.
        return {**self.__dict__, "_db": None}

    @property
    def db(self) -> psycopg.Connection[Any]:
        """The connection, opened on first use (in the process Spark runs this reader in)."""
        if self._db is None or self._db.closed:
            self._db = psycopg.connect(self.options.url, autocommit=True)
            # jsonb numbers as Decimal: a numeric column's value stays exact.
            set_json_loads(exact_json, self._db)
            self.connected(self._db)
        return self._db

    def connected(self, db: psycopg.Connection[Any]) -> None:
        """A new connection is made (a reader sets up its session here)."""

    def _retrying(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``work(connection)``, connecting again while the database is away
        (``sources.postgres`` rule 5).

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

    def stop(self) -> None:
        """The stream stopped: close the connection."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def _batches(self, rows: list[Row]) -> Iterator[pa.RecordBatch]:
        return to_batches(rows, self.arrow_schema, self.options.table, self.options.key)


def refuse_truncate(db: psycopg.Connection[Any], table: str) -> None:
    """Refuse ``TRUNCATE`` on ``table`` (a statement trigger: writers of rows pay nothing)."""
    db.execute(TABLES)
    name = sql.Identifier(table)
    truncate = sql.Identifier(f"fanout_refuse_truncate_{table}")
    db.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(truncate, name))
    db.execute(
        sql.SQL(
            "CREATE TRIGGER {} BEFORE TRUNCATE ON {}"
            " FOR EACH STATEMENT EXECUTE FUNCTION fanout_refuse_truncate()"
        ).format(truncate, name)
    )
