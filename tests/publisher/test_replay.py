"""Serving the log back: replays for resuming relays and knowledge for curious ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fanout.errors import BadRequest
from fanout.publisher.datasets import SimulationSource, agents
from fanout.publisher.log import LogEntry, LogGap, SqliteLog
from fanout.publisher.replay import MAX_CURIOSITY, LoggedStream
from fanout.publisher.sources.simulation import SimulationParams
from fanout.wire.columns import decode_columns

DATASET = agents(SimulationParams())
assert isinstance(DATASET.source, SimulationSource)


def rows(seq: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([seq, seq + 100], pa.int64()),
            "x": [1.0, 2.0],
            "y": [1.0, 2.0],
            "kind": pa.array([0, 0], pa.int32()),
            "tick": pa.array([seq, seq], pa.int64()),
            "ts": [0.0, 0.0],
            "_version": pa.array([seq, seq], pa.int64()),
            "_deleted": [False, True],
        }
    )


@pytest.fixture
def stream(tmp_path: Path) -> LoggedStream:
    log = SqliteLog(tmp_path / "log.db")
    for seq in range(3, 9):
        log.append(LogEntry("agents", 7, seq, seq, float(seq), rows(seq)))
    return LoggedStream(log, DATASET, epoch=7)


def test_replay_sends_every_logged_change_after_the_seq(stream: LoggedStream) -> None:
    batches = stream.replay(7, after=5)
    assert [b.seq for b in batches] == [6, 7, 8]
    upserts, deletes = decode_columns(batches[0].upserts), decode_columns(batches[0].deletes)
    assert upserts["id"].tolist() == [6]  # the tombstone is a delete, not an upsert
    assert deletes["id"].tolist() == [106]
    assert stream.replay(7, after=8) == []


def test_replay_beyond_the_log_or_from_another_epoch_is_refused(stream: LoggedStream) -> None:
    stream.log.trim("agents", 7, below=5)
    with pytest.raises(LogGap, match="trimmed"):
        stream.replay(7, after=2)
    with pytest.raises(BadRequest, match="epoch 6 is over"):
        stream.replay(6, after=2)


def test_knowledge_answers_a_range_and_refuses_bad_ones(stream: LoggedStream) -> None:
    answers = stream.knowledge(req=4, epoch=7, first=4, last=5)
    assert [(a.req, a.seq) for a in answers] == [(4, 4), (4, 5)]
    with pytest.raises(BadRequest, match="ask for 1 to"):
        stream.knowledge(req=1, epoch=7, first=5, last=4)
    with pytest.raises(BadRequest, match="ask for 1 to"):
        stream.knowledge(req=1, epoch=7, first=0, last=MAX_CURIOSITY)
    with pytest.raises(LogGap):
        stream.knowledge(req=1, epoch=7, first=8, last=10)
