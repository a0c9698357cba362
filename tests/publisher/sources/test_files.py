"""The files source: dropped files become the latest state per key; later files win."""

from __future__ import annotations

import datetime
import json
import math
import os
import random
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fanout.errors import ConfigError
from fanout.publisher.datasets import Dataset, FilesSource
from fanout.publisher.sources.files import files_stream, read_schema, rejections
from fanout.publisher.state import latest_per_key
from fanout.testing.wait import eventually_sync

pytestmark = pytest.mark.spark

SCHEMA: dict[str, Any] = {"id": "long", "name": "string", "score": "double", "n": "int"}
Row = dict[str, Any]
#: One file: its rows, in order; a row with ``deleted`` true deletes its key.
File = list[Row]


def dataset(folder: Path, fmt: str, **source: Any) -> Dataset:
    return Dataset(
        name=f"files_{fmt}",
        key="id",
        schema=SCHEMA,
        index="sql",
        index_columns=tuple(SCHEMA),
        source=FilesSource(path=str(folder), format=fmt, deleted="deleted", **source),
    )


def random_files(rng: random.Random, count: int) -> list[File]:
    """Files of updates and deletes on few keys, so keys repeat within and across files."""
    files = []
    for _ in range(count):
        rows = []
        for _ in range(rng.randint(3, 12)):
            key = rng.randrange(12)
            if rng.random() < 0.2:
                rows.append({"id": key, "deleted": True})
            else:
                value = rng.randrange(1000)
                rows.append({"id": key, "name": f"k{key}-{value}", "score": value / 4, "n": value})
        files.append(rows)
    return files


def oracle(files: list[File]) -> dict[int, tuple[Any, ...]]:
    """Live rows by key after applying every file's rows in order: later files win."""
    state: dict[int, tuple[Any, ...] | None] = {}
    for rows in files:
        for row in rows:
            deleted = row.get("deleted", False)
            state[row["id"]] = None if deleted else (row["name"], row["score"], row["n"])
    return {key: value for key, value in state.items() if value is not None}


class DropFolder:
    """The watched folder; files are written aside, stamped, then moved in whole."""

    def __init__(self, root: Path) -> None:
        self.path, self.staging = root / "in", root / "staging"
        self.path.mkdir()
        self.staging.mkdir()

    def drop(self, name: str, rows: File, mtime: float) -> None:
        """Write ``rows`` as file ``name`` (its suffix is its format) modified at ``mtime``."""
        path = self.staging / name
        fmt = path.suffix.removeprefix(".")
        if fmt == "json":
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        elif fmt == "csv":
            path.write_text(csv_text(rows))
        else:
            pq.write_table(parquet_table(rows), path)
        os.utime(path, (mtime, mtime))
        path.replace(self.path / name)


def csv_text(rows: File, header: str = "id,name,score,n,deleted") -> str:
    lines = [header]
    for row in rows:
        fields = [row["id"], row.get("name"), row.get("score"), row.get("n")]
        text = ["" if value is None else str(value) for value in fields]
        lines.append(",".join([*text, "true" if row.get("deleted") else "false"]))
    return "\r\n".join(lines) + "\r\n"  # CRLF, as spreadsheets write it


def parquet_table(rows: File) -> pa.Table:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("n", pa.int32()),
            ("deleted", pa.bool_()),
        ]
    )
    full = [{**dict.fromkeys(SCHEMA), "deleted": False, **row} for row in rows]
    return pa.Table.from_pylist(full, schema=schema)


class LatestState:
    """A foreachBatch sink applying ``latest_per_key``'s updates to a dict, like a relay."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Any, ...] | None] = {}

    def __call__(self, batch: Any, batch_id: int) -> None:
        for row in batch.collect():
            live = None if row["_deleted"] else (row["name"], row["score"], row["n"])
            self.rows[row["id"]] = live

    def live(self) -> dict[int, tuple[Any, ...]]:
        return {key: value for key, value in self.rows.items() if value is not None}


@pytest.mark.parametrize(("fmt", "max_files"), [("json", 2), ("csv", 100), ("parquet", 100)])
def test_latest_state_per_key_matches_the_files_in_mtime_order(
    spark, tmp_path, fmt: str, max_files: int
) -> None:
    folder = DropFolder(tmp_path)
    files = random_files(random.Random(fmt), 6)
    # Names run against mtimes, so only the mtime can be what orders the files.
    base = time.time() - 1000
    names = [f"{fmt}-{9 - i}.{fmt}" for i in range(len(files))]
    for i in (0, 1, 2, 3):
        folder.drop(names[i], files[i], base + i)
    ds = dataset(folder.path, fmt, max_files_per_trigger=max_files)
    sink = LatestState()
    query = (
        latest_per_key(files_stream(spark, ds), ds)
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(sink)
        .start()
    )
    try:
        query.processAllAvailable()
        assert sink.live() == oracle(files[:4])
        for i in (4, 5):
            folder.drop(names[i], files[i], base + i)
        if fmt == "csv":
            # A header naming other columns: every line of the file is rejected.
            swapped = csv_text(files[0], header="name,id,score,n,deleted")
            (folder.path / "swapped.csv").write_text(swapped)
        query.processAllAvailable()
        assert sink.live() == oracle(files)
        # admission control: 4 + 2 files in batches of at most max_files
        last = query.lastProgress
        assert last["batchId"] == (2 if max_files == 2 else 1)
        if fmt == "csv":
            assert last["observedMetrics"]["fanout_files:files_csv"]["rejected"] == len(files[0])
    finally:
        query.stop()


def test_malformed_lines_are_rejected_counted_and_the_rest_ingested_in_order(
    spark, tmp_path
) -> None:
    """A declared order column (``n``) decides between versions, not the line."""
    folder = DropFolder(tmp_path)
    lines = [
        '{"id": 1, "name": "a", "score": 1.0, "n": 1}',
        '{"id": 2, "name": "b", "score": 2.',  # cut short
        '{"id": "three", "name": "c", "score": 3.0, "n": 3}',  # a key that is not a long
        '{"name": "d", "score": 4.0, "n": 4}',  # no key
        '{"id": 5, "name": "e", "score": 5.0, "n": 5, "extra": true}',  # extra fields: fine
        "",
        '{"id": 1, "deleted": true, "n": 9}',
        '{"id": 6, "name": "f", "score": 6, "n": 6}',
        '{"id": 5, "name": "stale", "score": 0.5, "n": 2}',  # a later line, an older version
        '{"id": 6, "name": "g", "score": 7.0}',  # no order value
    ]
    (folder.path / "mixed.json").write_text("\n".join(lines) + "\n")
    ds = Dataset(
        name="files_malformed",
        key="id",
        schema=SCHEMA,
        index="sql",
        index_columns=tuple(SCHEMA),
        source=FilesSource(path=str(folder.path), format="json", deleted="deleted"),
        order="n",
    )
    sink = LatestState()
    counter = rejections(spark)
    query = (
        latest_per_key(files_stream(spark, ds), ds)
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(sink)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.live() == {5: ("e", 5.0, 5), 6: ("f", 6.0, 6)}
    assert query.lastProgress["observedMetrics"]["fanout_files:files_malformed"]["rejected"] == 4
    # The listener hears of the batch on Spark's listener bus, a moment after the batch.
    eventually_sync(lambda: counter.counts.get("files_malformed"), lambda n: n == 4)
    assert counter.samples["files_malformed"].startswith("mixed.json:2: malformed: ")


def test_the_read_schema_is_declared_never_inferred(tmp_path) -> None:
    ds = dataset(tmp_path, "csv")
    assert read_schema(ds) == (
        "`id` bigint, `name` string, `score` double, `n` int, `deleted` boolean, "
        "`_corrupt_record` string"
    )
    declared = Dataset(
        name="d",
        key="id",
        schema={**SCHEMA, "gone": "boolean"},
        index="sql",
        index_columns=("id",),
        source=FilesSource(path=str(tmp_path), format="parquet", deleted="gone"),
    )
    assert read_schema(declared) == (
        "`id` bigint, `name` string, `score` double, `n` int, `gone` boolean"
    )


def test_bad_declarations_are_named(spark, tmp_path) -> None:
    bad_order = Dataset(
        name="d",
        key="id",
        schema=SCHEMA,
        index="sql",
        index_columns=("id",),
        source=FilesSource(path=str(tmp_path)),
        order="score",
    )
    with pytest.raises(ConfigError, match="order column 'score' must be a long or int"):
        files_stream(spark, bad_order)
    bad_deleted = Dataset(
        name="d",
        key="id",
        schema=SCHEMA,
        index="sql",
        index_columns=("id",),
        source=FilesSource(path=str(tmp_path), deleted="name"),
    )
    with pytest.raises(ConfigError, match="deleted column 'name' must be boolean"):
        files_stream(spark, bad_deleted)


TYPED: dict[str, Any] = {
    "id": "long",
    "fare": "decimal(6,2)",
    "at": "timestamp",
    "km": "double",
    "speed": "float",
    "blob": "bytes",
}


def typed_rows(spark, tmp_path: Path, fmt: str, text: str) -> tuple[dict[int, Any], Any]:
    """The rows of one ``fmt`` file of TYPED columns, and the micro-batch's observed metric."""
    folder = DropFolder(tmp_path)
    (folder.path / f"typed.{fmt}").write_text(text)
    ds = Dataset(
        name=f"typed_{fmt}",
        key="id",
        schema=TYPED,
        index="sql",
        index_columns=("id",),
        source=FilesSource(path=str(folder.path), format=fmt),
    )
    rows: dict[int, Any] = {}

    def sink(batch: Any, batch_id: int) -> None:
        rows.update({row["id"]: row.asDict() for row in batch.collect()})

    query = (
        files_stream(spark, ds)
        .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
        .foreachBatch(sink)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return rows, query.lastProgress["observedMetrics"][f"fanout_files:typed_{fmt}"]


def test_json_values_that_do_not_fit_are_refused_with_key_and_column(spark, tmp_path) -> None:
    """Spark's JSON parsing would round the decimal, read the naive time as UTC and the large
    numbers as infinities; the rows are refused instead, naming key and column."""
    lines = [
        '{"id": 1, "fare": 12.5, "at": "2024-03-01T10:00:00+01:00", "km": 1e300, "blob": "AP8="}',
        '{"id": 2, "fare": 1.001}',
        '{"id": 3, "at": "2024-03-01T10:00:00"}',
        '{"id": 4, "km": 1e400}',
        '{"id": 5, "speed": 3.5e38}',
        '{"id": 6, "km": Infinity, "speed": "-Infinity", "fare": "9999.99"}',
        '{"id": 7, "fare": 12345.0}',
    ]
    rows, metric = typed_rows(spark, tmp_path, "json", "\n".join(lines) + "\n")
    assert set(rows) == {1, 6}
    assert rows[1]["fare"] == Decimal("12.50") and rows[1]["blob"] == b"\x00\xff"
    assert rows[1]["at"] == datetime.datetime(2024, 3, 1, 9)  # UTC, as Spark's rows are
    assert rows[6]["km"] == math.inf and rows[6]["speed"] == -math.inf
    assert rows[6]["fare"] == Decimal("9999.99")
    assert metric["rejected"] == 5
    samples = metric["samples"]
    assert (
        samples[0] == f"typed.json:2: key 2: column 'fare' is decimal(6,2), not 1.001: {lines[1]}"
    )
    assert samples[1].startswith(
        "typed.json:3: key 3: column 'at' is timestamp, not 2024-03-01T10:00:00"
        " (a timestamp needs a time zone)"
    )
    assert samples[2].startswith("typed.json:4: key 4: column 'km' is double, not Infinity")
    assert samples[3].startswith("typed.json:5: key 5: column 'speed' is float, not 3.5E38")
    assert samples[4].startswith("typed.json:7: key 7: column 'fare' is decimal(6,2), not 12345")


def test_csv_values_are_fitted_and_bytes_are_base64(spark, tmp_path) -> None:
    lines = [
        "id,fare,at,km,speed,blob",
        "1,12.50,2024-03-01 10:00:00Z,1.5,2.5,AP8=",
        "2,,,,,",
        "3,0.125,,,,",
        "4,,2024-03-01,,,",
        "5,,,1e400,,",
        "6,,,Inf,1e39,",
        "7,,,,,not base64!",
        "8,,,,,YWI=",
    ]
    rows, metric = typed_rows(spark, tmp_path, "csv", "\n".join(lines) + "\n")
    assert set(rows) == {1, 2, 8}
    assert rows[1] == {
        "id": 1,
        "fare": Decimal("12.50"),
        "at": datetime.datetime(2024, 3, 1, 10),
        "km": 1.5,
        "speed": 2.5,
        "blob": b"\x00\xff",
        "_version": rows[1]["_version"],
        "_deleted": False,
    }
    assert rows[2]["fare"] is None and rows[2]["blob"] is None  # an empty field is NULL
    assert rows[8]["blob"] == b"ab"
    assert metric["rejected"] == 5
    reasons = [sample.split(": ", 2)[1:] for sample in metric["samples"]]
    assert [reason[0] for reason in reasons] == ["key 3", "key 4", "key 5", "key 6", "key 7"]
    assert reasons[0][1].startswith("column 'fare' is decimal(6,2), not 0.125")
    assert reasons[1][1].startswith("column 'at' is timestamp, not 2024-03-01")
    assert reasons[2][1].startswith("column 'km' is double, not 1e400")
    assert reasons[3][1].startswith("column 'speed' is float, not 1e39")
    assert reasons[4][1].startswith("column 'blob' is bytes, not not base64! (bytes are base64)")
