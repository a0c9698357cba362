"""The producers' source (``source = { kind = "ingest" }``): the events producers publish, read
from the ingest log (``sources.producerlog``) by offset. Rules:

1. **Driver-side.** ``fanout_ingest`` is a ``SimpleDataSourceStreamReader`` (the log is on the
   driver's disk); offsets are ``{"log": log id, "offset": n}``.
2. **Admission control.** ``read(start)`` returns at most ``maxRowsPerBatch`` events after
   ``start``, with ``_version`` and ``_deleted``.
3. **Exactly once.** ``readBetweenOffsets`` re-reads a range identically (on a cluster the state
   directory must be on storage the executors reach).
4. **Trimming.** ``commit(end)`` trims up to ``end``.
5. **Refusals.** A checkpoint of another log, ahead of it, or new on a trimmed log raises
   :class:`IngestLogError`, never skipping or repeating events.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from fanout.errors import ConfigError
from fanout.publisher.datasets import DELETED, VERSION, Dataset
from fanout.publisher.sources.options import lowered, max_rows
from fanout.publisher.sources.producerlog import (
    LOG_FILE,
    IngestBacklog,
    IngestEvent,
    IngestLog,
    IngestLogError,
)

__all__ = [
    "LOG_FILE",
    "IngestBacklog",
    "IngestDataSource",
    "IngestEvent",
    "IngestLog",
    "IngestLogError",
    "IngestStreamReader",
    "ReaderOptions",
    "ingest_stream",
]

SOURCE_NAME = "fanout_ingest"
#: Events per micro-batch at most (admission control); about 0.25 s of driver-side reading.
DEFAULT_MAX_ROWS_PER_BATCH = 100_000


@dataclass(frozen=True)
class ReaderOptions:
    """The options of the ``fanout_ingest`` source (Spark passes them as strings)."""

    path: str
    dataset: str
    schema: str
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH
    trim: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReaderOptions:
        """Parse Spark's options (``path``, ``dataset``, ``schema``, ``maxRowsPerBatch``, ``trim``).

        Raises:
            ConfigError: an option is missing or malformed.
        """
        found = lowered(options, SOURCE_NAME, ("path", "dataset", "schema"))
        rows = max_rows(found, SOURCE_NAME, DEFAULT_MAX_ROWS_PER_BATCH)
        trim = found.get("trim", "true").lower()
        if trim not in ("true", "false"):
            raise ConfigError(f"{SOURCE_NAME}: trim={trim!r} is not true or false")
        return cls(found["path"], found["dataset"], found["schema"], rows, trim == "true")


class IngestStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads one dataset's ingest log on the driver (rules 1-5)."""

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._log: IngestLog | None = None
        #: with Trigger.AvailableNow: read no further than the last offset when it started.
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        # An open SQLite connection cannot travel; whoever unpickles opens the log again.
        return {**self.__dict__, "_log": None}

    @property
    def log(self) -> IngestLog:
        """The log, opened on first use (in the process Spark runs this reader in)."""
        if self._log is None:
            self._log = IngestLog(self.options.path)
        return self._log

    def initialOffset(self) -> dict[str, Any]:
        """A new stream starts before the first event; refused if events were trimmed (rule 5)."""
        trimmed = self.log.trimmed(self.options.dataset)
        if trimmed:
            raise IngestLogError(
                f"dataset {self.options.dataset!r}: a new checkpoint cannot start on an ingest"
                f" log trimmed up to offset {trimmed} by an earlier one; restore that checkpoint"
                " or start with a new log"
            )
        return self._offset(0)

    def prepareForTriggerAvailableNow(self) -> None:
        """Read up to the events appended by now, no further."""
        self._target = self.log.latest(self.options.dataset)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, Any]]:
        """The next events after ``start``, at most ``max_rows_per_batch`` of them (rule 2)."""
        after = self._checked(start)
        latest = self.log.latest(self.options.dataset)
        if latest < after:
            raise IngestLogError(
                f"dataset {self.options.dataset!r}: the checkpoint read up to offset {after} but"
                f" the ingest log ends at {latest}"
            )
        target = latest if self._target is None else min(latest, self._target)
        end = max(after, min(target, after + self.options.max_rows_per_batch))
        return self._batches(after, end), self._offset(end)

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """The events in ``(start, end]`` again, identical to the first read (rule 3)."""
        return self._batches(self._checked(start), self._checked(end))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: trim it (rule 4)."""
        if self.options.trim:
            self.log.trim(self.options.dataset, self._checked(end))

    def _batches(self, after: int, upto: int) -> Iterator[pa.RecordBatch]:
        # A list iterator, not a generator: Spark's prefetch cache copies the iterator.
        if upto <= after:
            return iter([])
        table = self.log.read(self.options.dataset, after, upto)
        if table.schema.names != self.arrow_schema.names:
            raise ConfigError(
                f"dataset {self.options.dataset!r}: the ingest log's columns"
                f" {table.schema.names} differ from the stream's {self.arrow_schema.names}"
            )
        return iter(table.cast(self.arrow_schema).to_batches())

    def _offset(self, offset: int) -> dict[str, Any]:
        return {"log": self.log.log_id, "offset": offset}

    def _checked(self, offset: dict[str, Any]) -> int:
        if offset.get("log") != self.log.log_id:
            raise IngestLogError(
                f"dataset {self.options.dataset!r}: the checkpoint read ingest log"
                f" {offset.get('log')}, but {self.options.path} is log {self.log.log_id}"
            )
        return int(offset["offset"])


class IngestDataSource(DataSource):
    """``spark.readStream.format("fanout_ingest")`` with :class:`ReaderOptions` options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        declared = ReaderOptions.from_options(self.options).schema
        return f"{declared}, `{VERSION}` bigint, `{DELETED}` boolean"

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return IngestStreamReader(ReaderOptions.from_options(self.options), schema)


def ingest_stream(
    spark: SparkSession,
    dataset: Dataset,
    log_path: str | Path,
    *,
    max_rows_per_batch: int = DEFAULT_MAX_ROWS_PER_BATCH,
    trim: bool = True,
) -> DataFrame:
    """The events published to ``dataset`` as a stream of its columns, ``_version``, ``_deleted``.

    Declares the dataset in the log (creating the log if needed) and registers the source.

    Args:
        spark: the session.
        dataset: an ingest dataset.
        log_path: the publisher's ingest log (``state_dir / LOG_FILE``).
        max_rows_per_batch: events per micro-batch at most.
        trim: drop events once Spark has committed them (rule 4); off only to inspect a log.

    Raises:
        ConfigError: the dataset does not fit the log (see :meth:`IngestLog.declare`).
    """
    with IngestLog(log_path) as log:
        log.declare(dataset)
    spark.dataSource.register(IngestDataSource)
    options = {
        "path": str(log_path),
        "dataset": dataset.name,
        "schema": dataset.spark_schema(),
        "maxRowsPerBatch": str(max_rows_per_batch),
        "trim": str(trim).lower(),
    }
    return spark.readStream.format(SOURCE_NAME).options(**options).load()
