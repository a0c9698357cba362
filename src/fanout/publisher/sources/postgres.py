"""The ``postgres`` source: a PostgreSQL table's rows and every change to them (Liebig et al.: the
DB connector), read as a Spark stream (docs/configuration.md, "The postgres source"). Rules:

1. **Capture, chosen once.** ``"logical"`` reads a replication slot (``sources.postgres_logical``),
   ``"trigger"`` a trigger's change table (``sources.postgres_trigger``), ``"auto"`` the first
   the server allows, saying so; an explicit choice it cannot honour is an error.
2. **Commit order, no gaps, no repeats**: each change's ``_version`` is the next number, and
   reading the same offsets again gives the same changes; a new stream reads the rows first.
3. **Driver-side, exactly once, trimmed** only once Spark committed; a range no longer there is
   refused, never skipped.
4. **Keys.** A delete carries the old row's key; a key change is a delete and an upsert.
5. **A database away** is reconnected to, with backoff, for ``RECONNECT_FOR`` seconds; values
   that do not fit are refused, not fatal (``sources.postgres_values``). One stream a table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import psycopg
import pyspark.sql.functions as sf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from fanout.publisher.datasets import DELETED, VERSION, Dataset, PostgresSource
from fanout.publisher.sources.postgres_logical import (
    LogicalStreamReader,
    drop_logical,
    install_logical,
    why_not_logical,
)
from fanout.publisher.sources.postgres_reader import (
    DEFAULT_MAX_ROWS_PER_BATCH,
    SOURCE_NAME,
    Capture,
    CaptureError,
    ReaderOptions,
)
from fanout.publisher.sources.postgres_trigger import (
    TriggerStreamReader,
    drop_trigger,
    install_trigger,
)
from fanout.publisher.sources.postgres_values import PROBLEM
from fanout.publisher.sources.refusals import POSTGRES_PREFIX, drop_refused, refusals

log = logging.getLogger(__name__)

#: Characters of a refused change's problem logged at most.
SAMPLE_CHARS = 300


def install(
    url: str, table: str, key: str, columns: Mapping[str, str], capture: str = "auto"
) -> Capture:
    """Capture ``table``'s changes as ``capture`` says (rule 1); return how.

    Raises:
        CaptureError: the database cannot be reached, the table lacks a dataset's column or
            has one of another type, or ``capture`` cannot be honoured (the message says why).
    """
    try:
        with psycopg.connect(url, autocommit=True) as db:
            chosen: Capture
            if capture == "auto":
                why = why_not_logical(db)
                chosen = "trigger" if why else "logical"
                if why:
                    log.warning("table %s: captured by a trigger: %s", table, why)
            elif capture in ("logical", "trigger"):
                chosen = "logical" if capture == "logical" else "trigger"
            else:
                raise CaptureError(
                    f"postgres source: capture {capture!r} is not auto, logical or trigger"
                )
            if chosen == "logical":
                install_logical(url, table, key, columns)
                drop_trigger(db, table)
            else:
                install_trigger(url, table, key, columns)
                drop_logical(db, url, table)
    except psycopg.Error as exc:
        raise CaptureError(f"postgres source for table {table!r}: {exc}") from exc
    return chosen


class PostgresDataSource(DataSource):
    """``spark.readStream.format("fanout_postgres")`` with :class:`ReaderOptions` options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        declared = ReaderOptions.from_options(self.options).schema
        return f"{declared}, `{VERSION}` bigint, `{DELETED}` boolean, `{PROBLEM}` string"

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        options = ReaderOptions.from_options(self.options)
        if options.capture == "logical":
            return LogicalStreamReader(options, schema)
        return TriggerStreamReader(options, schema)


def postgres_stream(
    spark: SparkSession, dataset: Dataset, *, max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
) -> DataFrame:
    """A captured table's rows, then its changes, as a stream of the dataset's columns,
    ``_version`` and ``_deleted``; installs the capture first (``install``, as the source's
    ``capture`` says).

    Raises:
        CaptureError: the table cannot be captured (see ``install``).
    """
    source = dataset.source
    assert isinstance(source, PostgresSource)
    table = source.table or dataset.name
    capture = install(source.url, table, dataset.key, dataset.schema, source.capture)
    spark.dataSource.register(PostgresDataSource)
    options = {
        "url": source.url,
        "table": table,
        "schema": dataset.spark_schema(),
        "maxRowsPerBatch": str(max_rows_per_batch),
        "key": dataset.key,
        "capture": capture,
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
