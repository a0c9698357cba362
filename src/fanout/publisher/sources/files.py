"""The ``files`` source: JSON lines, CSV or Parquet files dropped into a folder (Spark file source).

Rules, in the order a row meets them:

1. **Schema.** Files are read with the dataset's declared schema, never an inferred one. The
   source's ``deleted`` column, when it is not a dataset column, is a boolean column of the files
   appended to that schema (CSV: after the dataset's columns). CSV files have a header and their
   columns in that order; Spark checks the header against the schema (``enforceSchema=false``).
2. **Malformed input is rejected, counted and logged, never fatal.** JSON and CSV are read in
   ``PERMISSIVE`` mode with a corrupt-record column: a line that does not parse or whose values do
   not fit the declared types (or a CSV line with the wrong number of fields) is rejected whole,
   as is any row without a key. Each micro-batch's rejections are an observed metric that
   :class:`Rejections` counts per dataset and logs with a sample line. A whole file Spark cannot
   read as declared (a CSV header that differs from the schema, a Parquet file with other column
   types, a truncated file) is skipped (``ignoreCorruptFiles``) and named in the log by Spark.
   ``FAILFAST`` is never used: one bad line must not stop the publisher. Options given in the
   dataset's ``options`` override these defaults.
3. **Deletes.** ``_deleted`` is the ``deleted`` column (null counts as false), or false.
4. **Versions.** With a declared ``order`` column (long or int), ``_version`` is that column.
   Otherwise later files win: ``_version = ms_since_2020(file mtime) << 22 | position``, where
   position is the row's index in the file (Parquet: ``_metadata.row_index``) or, for JSON/CSV,
   which Spark gives no row index, the row's index within its Spark partition (the low 33 bits of
   ``monotonically_increasing_id``), which grows with the row's place in the file. Both are the
   same when Spark re-reads a micro-batch (same files, same order), so a re-run batch yields the
   same state. Limits, documented rather than hidden: 41 bits of milliseconds reach 2089 (files
   modified before 2020 all count as 2020-01-01); positions saturate at 2**22 - 1 rows; two files
   modified in the same millisecond are ordered by position only, and a JSON/CSV file that Spark
   splits (larger than ``spark.sql.files.maxPartitionBytes``) orders repeated keys across its
   splits arbitrarily. Moving a file in keeps its mtime (``mv``): touch it, or declare ``order``.
   Spark's file source itself admits files oldest mtime first (``maxFilesPerTrigger`` per batch).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from fanout.errors import ConfigError
from fanout.publisher.datasets import DELETED, VERSION, Dataset, FilesSource

log = logging.getLogger(__name__)

CORRUPT = "_corrupt_record"
#: Observed-metric names of this source start with this, then the dataset's name.
METRIC_PREFIX = "fanout_files:"
#: 2020-01-01T00:00:00Z in epoch milliseconds: the zero of the time part of ``_version``.
EPOCH_MS = 1_577_836_800_000
POSITION_BITS = 22
MAX_POSITION = (1 << POSITION_BITS) - 1
#: ``monotonically_increasing_id`` keeps the row's index within its partition in its low 33 bits.
PARTITION_ROW_MASK = (1 << 33) - 1
SAMPLE_CHARS = 200
FILE_SCAN_LOGGER = "org.apache.spark.sql.execution.datasources.FileScanRDD"


def files_stream(spark: SparkSession, dataset: Dataset) -> DataFrame:
    """The rows of the files dropped into the dataset's folder, with ``_version``/``_deleted``.

    Args:
        spark: the session; a :class:`Rejections` listener is registered with it on first use.
        dataset: a dataset whose source is a :class:`FilesSource`.

    Returns:
        A streaming DataFrame of the declared columns plus ``_version`` and ``_deleted``.

    Raises:
        ConfigError: the source, its ``deleted`` column or the ``order`` column does not fit.
    """
    source = _files_source(dataset)
    rejections(spark)
    reader = (
        spark.readStream.format(source.format)
        .schema(read_schema(dataset))
        .options(**reader_options(source))
    )
    raw = reader.load(source.path)
    rows = raw.withColumn(VERSION, version_column(dataset)).withColumn(
        DELETED, deleted_column(source)
    )
    return reject_malformed(rows, dataset).select(*dataset.schema, VERSION, DELETED)


def _files_source(dataset: Dataset) -> FilesSource:
    source = dataset.source
    if not isinstance(source, FilesSource):
        raise ConfigError(f"dataset {dataset.name!r}: not a files source")
    if source.format not in ("json", "csv", "parquet"):
        raise ConfigError(f"dataset {dataset.name!r}: unknown file format {source.format!r}")
    if source.max_files_per_trigger < 1:
        raise ConfigError(f"dataset {dataset.name!r}: max_files_per_trigger must be at least 1")
    if source.deleted is not None and dataset.schema.get(source.deleted, "boolean") != "boolean":
        raise ConfigError(
            f"dataset {dataset.name!r}: deleted column {source.deleted!r} must be boolean"
        )
    if dataset.order is not None and dataset.schema.get(dataset.order) not in ("long", "int"):
        raise ConfigError(
            f"dataset {dataset.name!r}: order column {dataset.order!r} must be a long or int "
            "column of the dataset"
        )
    return source


def read_schema(dataset: Dataset) -> str:
    """The DDL schema the files are read with (see rule 1 of the module docstring).

    Raises:
        ConfigError: the dataset is not a files dataset.
    """
    source = _files_source(dataset)
    schema = dataset.spark_schema()
    if source.deleted is not None and source.deleted not in dataset.schema:
        schema += f", `{source.deleted}` boolean"
    if source.format != "parquet":
        schema += f", `{CORRUPT}` string"
    return schema


def reader_options(source: FilesSource) -> dict[str, str]:
    """Spark reader options: the defaults of rules 1-2, then the source's own options."""
    options = {
        "maxFilesPerTrigger": str(source.max_files_per_trigger),
        "ignoreCorruptFiles": "true",
    }
    if source.format != "parquet":
        options |= {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if source.format == "csv":
        options |= {"header": "true", "enforceSchema": "false"}
    return options | source.options


def version_column(dataset: Dataset) -> Column:
    """``_version``: the order column, or (file mtime, position in file) packed in one long."""
    if dataset.order is not None:
        return sf.col(dataset.order).cast("long")
    millis = sf.unix_millis(sf.col("_metadata.file_modification_time")) - sf.lit(EPOCH_MS)
    if _files_source(dataset).format == "parquet":
        position = sf.col("_metadata.row_index")
    else:
        position = sf.monotonically_increasing_id().bitwiseAND(sf.lit(PARTITION_ROW_MASK))
    time_part = sf.greatest(millis, sf.lit(0)) * sf.lit(1 << POSITION_BITS)
    return (time_part + sf.least(position, sf.lit(MAX_POSITION))).cast("long")


def deleted_column(source: FilesSource) -> Column:
    """``_deleted``: the source's deleted column (null is false), or false."""
    if source.deleted is None:
        return sf.lit(False)
    return sf.coalesce(sf.col(source.deleted), sf.lit(False))


def reject_malformed(rows: DataFrame, dataset: Dataset) -> DataFrame:
    """Drop malformed or keyless rows, counting them in an observed metric (rule 2)."""
    bad = sf.col(dataset.key).isNull()
    reason = sf.lit("no key")
    line = sf.lit("")
    if _files_source(dataset).format != "parquet":
        corrupt = sf.col(CORRUPT).isNotNull()
        bad = bad | corrupt
        reason = sf.when(corrupt, sf.lit("malformed")).otherwise(reason)
        line = sf.coalesce(sf.substring(sf.col(CORRUPT), 1, SAMPLE_CHARS), line)
    sample = sf.concat_ws(": ", sf.col("_metadata.file_name"), reason, line)
    observed = rows.observe(
        METRIC_PREFIX + dataset.name,
        sf.count_if(bad).alias("rejected"),
        sf.min(sf.when(bad, sample)).alias("sample"),
    )
    return observed.where(~bad)


class Rejections(StreamingQueryListener):
    """Counts and logs the rows the files source rejected, from each micro-batch's metrics.

    Attributes:
        counts: dataset -> rows rejected since this listener was registered.
        samples: dataset -> the last sample reported (``file: reason: line``).
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self._lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to count yet."""

    def onQueryProgress(self, event: Any) -> None:
        """Add this micro-batch's rejections and log them."""
        progress = event.progress
        for name, row in progress.observedMetrics.items():
            if not name.startswith(METRIC_PREFIX) or not row["rejected"]:
                continue
            self.add(
                name.removeprefix(METRIC_PREFIX), progress.batchId, row["rejected"], row["sample"]
            )

    def onQueryTerminated(self, event: Any) -> None:
        """Counts stay: they describe the files, not the query."""

    def add(self, dataset: str, batch_id: int, rejected: int, sample: str | None) -> None:
        """Record ``rejected`` rows of ``dataset`` in micro-batch ``batch_id``."""
        with self._lock:
            self.counts[dataset] = self.counts.get(dataset, 0) + rejected
            if sample is not None:
                self.samples[dataset] = sample
        log.warning(
            "dataset %s, batch %d: rejected %d malformed file row(s), e.g. %s",
            dataset,
            batch_id,
            rejected,
            sample,
        )


_LISTENERS: weakref.WeakKeyDictionary[SparkSession, Rejections] = weakref.WeakKeyDictionary()
_LISTENERS_LOCK = threading.Lock()


def rejections(spark: SparkSession) -> Rejections:
    """The session's :class:`Rejections` listener, registered with it on first use.

    Also lets Spark's file scan log the files it skips (rule 2) even when the session's log
    level is ``ERROR``, as the publisher sets it.
    """
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(spark)
        if listener is None:
            listener = Rejections()
            spark.streams.addListener(listener)
            _LISTENERS[spark] = listener
            _log_skipped_files(spark)
        return listener


def _log_skipped_files(spark: SparkSession) -> None:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        # Spark Connect: the server's logging is the server's to configure.
        log.info("skipped corrupt files are logged by the Spark Connect server, not here")
        return
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(FILE_SCAN_LOGGER, log4j.Level.WARN)
