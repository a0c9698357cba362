"""The steps of one micro-batch (``publisher.microbatch``), each on its own."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from fanout.publisher.datasets import agents
from fanout.publisher.delivery import Stamp
from fanout.publisher.log import SqliteLog
from fanout.publisher.matching import matcher_for
from fanout.publisher.microbatch import (
    RETENTION_EVERY,
    advance,
    log_changes,
    match_changes,
    mirrored,
)
from fanout.publisher.mirror import Mirror
from fanout.publisher.sources.simulation import SimulationParams
from fanout.views import Box

DATASET = agents(SimulationParams(), cell_size=10.0)


def changed(rows: list[tuple[int, float, float, int, bool]]) -> pa.Table:
    """Changed rows of ``agents``: (id, x, y, version, deleted), ``ts`` = version / 10."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.float64()),
            "y": pa.array([r[2] for r in rows], pa.float64()),
            "kind": pa.array([0] * len(rows), pa.int32()),
            "tick": pa.array([r[3] for r in rows], pa.int64()),
            "ts": pa.array([r[3] / 10 for r in rows], pa.float64()),
            "_version": pa.array([r[3] for r in rows], pa.int64()),
            "_deleted": pa.array([r[4] for r in rows], pa.bool_()),
        }
    )


def test_the_tick_is_the_newest_version_and_never_goes_back() -> None:
    rows = changed([(1, 0.0, 0.0, 3, False), (2, 0.0, 0.0, 7, True)])
    assert advance(0, 0.0, rows, "ts") == (7, 0.7)
    assert advance(9, 5.0, rows, "ts") == (9, 5.0)
    assert advance(4, 2.0, rows.slice(0, 0), "ts") == (4, 2.0)
    before = time.time()
    tick, tick_time = advance(0, 0.0, rows, None)  # no time column: the time is now
    assert tick == 7 and before <= tick_time <= time.time()


def test_changes_are_logged_and_retention_keeps_what_relays_hold(tmp_path: Path) -> None:
    rows = changed([(1, 0.0, 0.0, 1, False)])
    floors: list[int] = []

    def floor() -> dict[tuple[str, int], int]:
        floors.append(1)
        return {("agents", 1): 40}

    with SqliteLog(tmp_path / "log.db") as log:
        for seq in range(1, RETENTION_EVERY):
            log_changes(log, Stamp("agents", 1, seq, seq, 0.0), rows, floor, 60.0)
        assert log.bounds("agents", 1) == (1, RETENTION_EVERY - 1) and floors == []
        stamp = Stamp("agents", 1, RETENTION_EVERY, RETENTION_EVERY, 0.0)
        log_changes(log, stamp, rows, floor, 60.0)
        # every entry is older than 60 s; those a relay still needs stay
        assert log.bounds("agents", 1) == (40, RETENTION_EVERY) and floors == [1]


def test_snapshots_come_from_the_mirror_when_it_is_or_will_be_as_of_the_micro_batch() -> None:
    mirror = Mirror("id", ("x", "y"))
    assert mirrored(mirror, 0)  # a new stream's first micro-batch loads it
    assert not mirrored(mirror, 3)
    mirror.load(changed([(1, 0.0, 0.0, 1, False)]), 3)
    assert mirrored(mirror, 3) and mirrored(mirror, 4) and not mirrored(mirror, 5)
    assert not mirrored(Mirror("id", ("x", "y"), max_rows=0), 0)


@pytest.mark.spark
def test_changes_are_one_row_per_key_and_matched_live_rows_per_relay(spark) -> None:
    rows = changed([(3, 5.0, 5.0, 2, False), (1, 50.0, 50.0, 2, False), (2, 6.0, 6.0, 2, True)])
    frame = spark.createDataFrame(rows)
    matcher = matcher_for(DATASET)
    alone = match_changes(frame, DATASET, matcher, None)
    assert alone.rows.column_names == rows.column_names
    assert alone.rows["id"].to_pylist() == [1, 2, 3] and alone.matched == {}
    prims = [
        (7, 1, Box((0, 0), (10, 10))),
        (7, 2, Box((4, 4), (8, 8))),
        (8, 3, Box((40, 40), (60, 60))),
    ]
    tables = matcher.tables(spark, prims)
    try:
        matched = match_changes(frame, DATASET, matcher, tables)
    finally:
        tables.unpersist()
    assert matched.rows.column_names == rows.column_names
    assert matched.rows["id"].to_pylist() == [1, 2, 3]  # once each, however many relays hold it
    # a row two primitives of one relay hold comes twice (the build keeps one); the deleted
    # key 2 is no live row of relay 7's
    held = {relay: part["id"].to_pylist() for relay, part in matched.matched.items()}
    assert held == {7: [3, 3], 8: [1]}
