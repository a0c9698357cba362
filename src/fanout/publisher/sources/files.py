"""The ``files`` source: JSON lines, CSV or Parquet files dropped into a folder (Spark file source;
docs/configuration.md, "Sources"). Rules, in the order a row meets them:

1. **Schema.** The dataset's declared schema, never an inferred one (plus the files' own
   ``deleted`` column, if any). Text files are UTF-8.
2. **Lines.** JSON and CSV files are read whole and split into lines, so every row knows its
   line; Parquet rows their ``_metadata.row_index``. Blank lines are skipped.
3. **Malformed input is refused, counted and logged, never fatal** (``PERMISSIVE`` with a
   corrupt-record column; values fitted by ``sources.textfit``; counted by
   ``sources.refusals``); unreadable files are skipped (``ignoreCorruptFiles``). The options
   these rules need cannot be overridden.
4. **Deletes.** ``_deleted`` is the ``deleted`` column (null: false), or false.
5. **Versions.** The ``order`` column, or ``ms_since_2020(mtime) << 22 | line``: later files
   win, and later lines, the same when Spark re-reads a micro-batch.
"""

from __future__ import annotations

import logging

import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.streaming.readwriter import DataStreamReader

from fanout.errors import ConfigError
from fanout.publisher.datasets import DELETED, VERSION, Dataset, FilesSource
from fanout.publisher.sources.refusals import FILES_PREFIX, Refusals, drop_refused, refusals
from fanout.publisher.sources.textfit import fit, parse_type

log = logging.getLogger(__name__)

CORRUPT = "_corrupt_record"
#: Working columns, dropped before the stream leaves this module.
FILE, MTIME, POSITION, LINE, PROBLEM = "_file", "_mtime", "_position", "_line", "_problem"
#: Observed-metric names of this source start with this, then the dataset's name.
METRIC_PREFIX = FILES_PREFIX
#: 2020-01-01T00:00:00Z in epoch milliseconds: the zero of the time part of ``_version``.
EPOCH_MS = 1_577_836_800_000
POSITION_BITS = 22
MAX_POSITION = (1 << POSITION_BITS) - 1
SAMPLE_CHARS = 200
FILE_SCAN_LOGGER = "org.apache.spark.sql.execution.datasources.FileScanRDD"


def files_stream(spark: SparkSession, dataset: Dataset) -> DataFrame:
    """The rows of the files dropped into the dataset's folder, with ``_version``/``_deleted``.

    Args:
        spark: the session; a ``Refusals`` listener is registered with it on first use.
        dataset: a dataset whose source is a :class:`FilesSource`.

    Returns:
        A streaming DataFrame of the declared columns plus ``_version`` and ``_deleted``.

    Raises:
        ConfigError: the source, its ``deleted`` column or the ``order`` column does not fit.
    """
    source = files_source(dataset)
    rejections(spark)
    reader = spark.readStream.options(**reader_options(source))
    if source.format == "parquet":
        rows = parquet_rows(reader, dataset, source)
    else:
        rows = text_rows(reader, dataset, source)
    rows = rows.withColumn(VERSION, version_column(dataset)).withColumn(
        DELETED, deleted_column(source)
    )
    # A row without an order value has no place among its key's versions.
    unordered = sf.when(sf.col(VERSION).isNull(), sf.lit(f"no {dataset.order}"))
    rows = rows.withColumn(PROBLEM, sf.coalesce(sf.col(PROBLEM), unordered))
    return reject_malformed(rows, dataset.name).select(*dataset.schema, VERSION, DELETED)


def files_source(dataset: Dataset) -> FilesSource:
    """The dataset's files source, checked against the dataset.

    Raises:
        ConfigError: not a files dataset, or a setting that does not fit its schema.
    """
    source = dataset.source
    name = dataset.name
    if not isinstance(source, FilesSource):
        raise ConfigError(f"dataset {name!r}: not a files source")
    if source.format not in ("json", "csv", "parquet"):
        raise ConfigError(f"dataset {name!r}: unknown file format {source.format!r}")
    if source.max_files_per_trigger < 1:
        raise ConfigError(f"dataset {name!r}: max_files_per_trigger must be at least 1")
    if source.deleted is not None and dataset.schema.get(source.deleted, "boolean") != "boolean":
        raise ConfigError(f"dataset {name!r}: deleted column {source.deleted!r} must be boolean")
    if dataset.order is not None and dataset.schema.get(dataset.order) not in ("long", "int"):
        raise ConfigError(
            f"dataset {name!r}: order column {dataset.order!r} must be a long or int column"
        )
    return source


def file_columns(dataset: Dataset) -> list[str]:
    """The columns of the files: the dataset's, then the deleted column if it is not one."""
    source = files_source(dataset)
    extra = [source.deleted] if source.deleted and source.deleted not in dataset.schema else []
    return [*dataset.schema, *extra]


def read_schema(dataset: Dataset) -> str:
    """The DDL schema rows are read with (rule 1; JSON/CSV add the corrupt-record column).

    Raises:
        ConfigError: the dataset is not a files dataset.
    """
    source = files_source(dataset)
    schema = dataset.spark_schema()
    if source.deleted is not None and source.deleted not in dataset.schema:
        schema += f", `{source.deleted}` boolean"
    if source.format != "parquet":
        schema += f", `{CORRUPT}` string"
    return schema


def reader_options(source: FilesSource) -> dict[str, str]:
    """Spark reader options: defaults, the source's own options, then what rules 2-3 need."""
    needed = {"maxFilesPerTrigger": str(source.max_files_per_trigger)}
    if source.format != "parquet":
        needed["wholetext"] = "true"
    return {"ignoreCorruptFiles": "true"} | source.options | needed


def parser_options(source: FilesSource) -> dict[str, str]:
    """``from_json`` / ``from_csv`` options: the source's own, but always permissive (rule 3)."""
    return source.options | {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def has_header(source: FilesSource) -> bool:
    """CSV files start with a header line unless the source's options say ``header=false``."""
    return source.format == "csv" and source.options.get("header", "true").lower() != "false"


def parquet_rows(reader: DataStreamReader, dataset: Dataset, source: FilesSource) -> DataFrame:
    """Parquet rows with their file, mtime and row index; a row without a key is a problem."""
    raw = reader.format("parquet").schema(read_schema(dataset)).load(source.path)
    return raw.select(
        *file_columns(dataset),
        sf.col("_metadata.file_name").alias(FILE),
        sf.col("_metadata.file_modification_time").alias(MTIME),
        sf.col("_metadata.row_index").alias(POSITION),
        sf.lit(None).cast("string").alias(LINE),
        sf.when(sf.col(dataset.key).isNull(), sf.lit("no key")).alias(PROBLEM),
    )


def text_rows(reader: DataStreamReader, dataset: Dataset, source: FilesSource) -> DataFrame:
    """JSON/CSV rows parsed line by line, each with its file, mtime, line number and problem."""
    whole = reader.format("text").load(source.path)
    lines = whole.select(
        sf.col("_metadata.file_name").alias(FILE),
        sf.col("_metadata.file_modification_time").alias(MTIME),
        sf.split(sf.col("value"), "\n").alias("_lines"),
    )
    header_problem = _csv_header_problem(dataset, source)
    exploded = lines.select(
        FILE,
        MTIME,
        header_problem.alias(PROBLEM),
        sf.posexplode("_lines").alias(POSITION, LINE),
    )
    exploded = exploded.withColumn(LINE, sf.regexp_replace(LINE, "\r$", ""))
    exploded = exploded.where(sf.trim(LINE) != "")
    if has_header(source):
        exploded = exploded.where(sf.col(POSITION) > 0)
    parse = sf.from_json if source.format == "json" else sf.from_csv
    parsed = exploded.withColumn(
        "_row", parse(sf.col(LINE), parse_schema(dataset), parser_options(source))
    )
    values, unfit = [], []
    for name in file_columns(dataset):
        kind = dataset.schema.get(name, "boolean")  # else the deleted column (rule 1)
        value, problem = fit(
            name, kind, source.format, sf.col(f"_row.`{name}`"), _raw(name, dataset, source)
        )
        values.append(value.alias(name))
        unfit.append(problem)
    # A refused value names the row's key (rule 3), as the other sources' refusals do.
    key = sf.concat(sf.lit("key "), sf.col(f"_row.`{dataset.key}`").cast("string"), sf.lit(": "))
    problem = (
        sf.when(sf.col(PROBLEM).isNotNull(), sf.col(PROBLEM))
        .when(sf.col(f"_row.{CORRUPT}").isNotNull(), sf.lit("malformed"))
        .when(sf.col(f"_row.`{dataset.key}`").isNull(), sf.lit("no key"))
        .otherwise(sf.concat(key, sf.coalesce(*unfit)))
    )
    return parsed.select(*values, FILE, MTIME, POSITION, LINE, problem.alias(PROBLEM))


def parse_schema(dataset: Dataset) -> str:
    """The DDL schema JSON/CSV lines are parsed with: rule 1's, with the columns that
    ``sources.textfit`` fits from their text read as text (or a JSON variant)."""
    source = files_source(dataset)
    columns = [
        f"`{name}` {parse_type(dataset.schema.get(name, 'boolean'), source.format)}"
        for name in file_columns(dataset)
    ]
    return ", ".join([*columns, f"`{CORRUPT}` string"])


def _raw(name: str, dataset: Dataset, source: FilesSource) -> Column:
    """Column ``name`` as the line spells it: a JSON variant, or a CSV field's text
    (``textfit.fit`` evaluates it only on a number parsed as an infinity)."""
    if source.format == "json":
        return sf.variant_get(sf.try_parse_json(sf.col(LINE)), f"$.{name}", "variant")
    texts = ", ".join(f"`{column}` string" for column in file_columns(dataset))
    options = source.options | {"mode": "PERMISSIVE"}
    return sf.from_csv(sf.col(LINE), texts, options).getField(name)


def _csv_header_problem(dataset: Dataset, source: FilesSource) -> Column:
    """A CSV file's problem if its header differs from rule 1's columns, else null."""
    if not has_header(source):
        return sf.lit(None).cast("string")
    expected = ",".join(file_columns(dataset))
    separator = "\\Q" + source.options.get("sep", ",") + "\\E"
    header = sf.regexp_replace(sf.element_at("_lines", 1), "\r$", "")
    names = sf.transform(
        sf.split(header, separator), lambda name: sf.trim(sf.regexp_replace(name, '"', ""))
    )
    fits = sf.array_join(names, ",") == sf.lit(expected)
    return sf.when(~fits, sf.lit(f"header is not {expected}"))


def version_column(dataset: Dataset) -> Column:
    """``_version``: the order column, or (file mtime, position in file) packed in one long."""
    if dataset.order is not None:
        return sf.col(dataset.order).cast("long")
    millis = sf.unix_millis(sf.col(MTIME)) - sf.lit(EPOCH_MS)
    time_part = sf.greatest(millis, sf.lit(0)) * sf.lit(1 << POSITION_BITS)
    return (time_part + sf.least(sf.col(POSITION), sf.lit(MAX_POSITION))).cast("long")


def deleted_column(source: FilesSource) -> Column:
    """``_deleted``: the source's deleted column (null is false), or false."""
    if source.deleted is None:
        return sf.lit(False)
    return sf.coalesce(sf.col(source.deleted), sf.lit(False))


def reject_malformed(rows: DataFrame, dataset_name: str) -> DataFrame:
    """Drop the rows with a problem, counting them in an observed metric (rule 3)."""
    sample = sf.concat_ws(
        ": ",
        sf.concat_ws(":", sf.col(FILE), (sf.col(POSITION) + 1).cast("string")),
        sf.col(PROBLEM),
        sf.substring(sf.col(LINE), 1, SAMPLE_CHARS),
    )
    return drop_refused(
        rows, METRIC_PREFIX + dataset_name, sf.col(PROBLEM), sample, sf.col(POSITION)
    )


def rejections(spark: SparkSession) -> Refusals:
    """The session's :class:`Refusals` listener, registered with it on first use.

    Also lets Spark's file scan log the files it skips (rule 3) even when the session's log
    level is ``ERROR``, as the publisher sets it.
    """
    listener = refusals(spark)
    _log_skipped_files(spark)
    return listener


def _log_skipped_files(spark: SparkSession) -> None:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        # Spark Connect: the server's logging is the server's to configure.
        log.info("files skipped as corrupt are logged by the Spark Connect server")
        return
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(FILE_SCAN_LOGGER, log4j.Level.WARN)
