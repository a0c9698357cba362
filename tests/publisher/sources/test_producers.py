"""The producers' source: capped, identical re-reads of the ingest log by offset, and every
event once, in offset order, through a real Spark stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from fanout.publisher.datasets import Dataset, IngestSource
from fanout.publisher.sources.producerlog import IngestEvent, IngestLog, IngestLogError
from fanout.publisher.sources.producers import IngestStreamReader, ReaderOptions, ingest_stream

TOPICS = Dataset(
    name="topics",
    key="topic",
    schema={"topic": "string", "v": "long"},
    index="sql",
    index_columns=("topic", "v"),
    source=IngestSource(),
)


def expected_row(dataset: Dataset, offset: int, event: IngestEvent) -> dict[str, Any]:
    values = dict.fromkeys(dataset.schema) | (event.values or {}) | {dataset.key: event.key}
    return {**values, "_version": offset, "_deleted": event.values is None}


@pytest.fixture
def log(tmp_path: Path):
    with IngestLog(tmp_path / "ingest.db", [TOPICS]) as opened:
        yield opened


def reader(path: Path, max_rows: int = 4, trim: bool = True) -> IngestStreamReader:
    options = ReaderOptions(str(path), "topics", TOPICS.spark_schema(), max_rows, trim)
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("v", LongType()),
            StructField("_version", LongType()),
            StructField("_deleted", BooleanType()),
        ]
    )
    return IngestStreamReader(options, schema)


def test_reader_reads_capped_ranges_and_re_reads_them_identically(log, tmp_path) -> None:
    log.append("topics", [IngestEvent(f"k{i % 3}", {"v": i}) for i in range(10)])
    log.append("topics", [IngestEvent("k1")])
    source = reader(tmp_path / "ingest.db")
    start = source.initialOffset()
    assert start == {"log": log.log_id, "offset": 0}
    seen = []
    while True:
        batches, end = source.read(start)
        first = pa.Table.from_batches(list(batches), schema=source.arrow_schema)
        if end == start:
            assert first.num_rows == 0
            break
        assert first.num_rows == min(4, end["offset"] - start["offset"])
        again = pa.Table.from_batches(
            list(source.readBetweenOffsets(start, end)), schema=source.arrow_schema
        )
        assert again.equals(first)
        seen += first.to_pylist()
        start = end
    assert [row["_version"] for row in seen] == list(range(1, 12))
    assert seen[-1] == {"topic": "k1", "v": None, "_version": 11, "_deleted": True}
    source.commit(start)
    assert log.trimmed("topics") == 11


def test_reader_refuses_a_checkpoint_that_does_not_fit_the_log(log, tmp_path) -> None:
    log.append("topics", [IngestEvent("a", {"v": 1}), IngestEvent("b", {"v": 2})])
    source = reader(tmp_path / "ingest.db")
    with pytest.raises(IngestLogError, match="the checkpoint read ingest log other"):
        source.read({"log": "other", "offset": 0})
    with pytest.raises(IngestLogError, match="read up to offset 5 but the ingest log ends at 2"):
        source.read({"log": log.log_id, "offset": 5})
    log.trim("topics", 1)
    with pytest.raises(IngestLogError, match="trimmed up to offset 1"):
        source.initialOffset()
    # Trigger.AvailableNow: nothing appended after the query started is read.
    source.prepareForTriggerAvailableNow()
    log.append("topics", [IngestEvent("c", {"v": 3})])
    assert source.read({"log": log.log_id, "offset": 1})[1]["offset"] == 2


@pytest.mark.spark
def test_stream_delivers_every_event_once_in_offset_order_across_a_failure(spark, tmp_path) -> None:
    path = tmp_path / "ingest.db"
    checkpoint = str(tmp_path / "checkpoint")
    published = [IngestEvent(f"k{i % 4}", {"v": i}) for i in range(16)] + [IngestEvent("k2")]
    with IngestLog(path, [TOPICS]) as log:
        log.append("topics", published[:12])
        log.append("topics", published[12:])
    attempts: dict[int, list[list[dict[str, Any]]]] = {}

    def sink(batch, batch_id: int) -> None:
        rows = batch.toArrow().to_pylist()
        attempts.setdefault(batch_id, []).append(rows)
        if batch_id == 1 and len(attempts[1]) == 1:
            raise RuntimeError("the sink fails once, before Spark commits batch 1")

    def run() -> Any:
        stream = ingest_stream(spark, TOPICS, path, max_rows_per_batch=10)
        return (
            stream.writeStream.option("checkpointLocation", checkpoint).foreachBatch(sink).start()
        )

    query = run()
    with pytest.raises(StreamingQueryException, match="the sink fails once"):
        query.processAllAvailable()
    query.stop()
    query = run()  # Spark re-runs batch 1 with the same offsets, read from the log again
    try:
        query.processAllAvailable()
        with IngestLog(path) as log:
            more = [IngestEvent("k9", {"v": 100 + i}) for i in range(3)]
            log.append("topics", more)
        query.processAllAvailable()
    finally:
        query.stop()
    assert attempts[1][0] == attempts[1][1]
    delivered = [row for batch_id in sorted(attempts) for row in attempts[batch_id][-1]]
    everything = published + more
    assert delivered == [
        expected_row(TOPICS, offset, event) for offset, event in enumerate(everything, 1)
    ]
    assert [len(attempts[batch_id][-1]) for batch_id in sorted(attempts)] == [10, 7, 3]
    with IngestLog(path) as log:
        # Spark commits a batch to its source when it plans the next one: all but the last.
        assert log.trimmed("topics") == 17
