"""Auditing an ``every`` subscriber against a real (SQLite) publisher log (testing/audit.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fanout.client import Update
from fanout.publisher.log import LogEntry, SqliteLog
from fanout.testing.audit import audit, latest_differences
from fanout.views import Box
from fanout.views.sql import parse as sql

VIEW = Box((0, 0), (10, 10))
# seq -> the micro-batch's whole change: key -> (x, y) or None for a delete
CHANGES: dict[int, dict[int, tuple[float, float] | None]] = {
    0: {1: (1.0, 1.0), 2: (20.0, 20.0), 3: (5.0, 5.0)},
    1: {1: (2.0, 2.0), 2: (3.0, 3.0)},  # 1 updated, 2 entered
    2: {3: None, 4: (50.0, 50.0)},  # 3 deleted: left; 4 outside: nothing
    3: {1: (30.0, 1.0)},  # 1 left the view
}


@pytest.fixture
def log(tmp_path: Path):
    with SqliteLog(tmp_path / "log.db") as stored:
        for seq, change in CHANGES.items():
            keys = sorted(change)
            rows = pa.table(
                {
                    "id": pa.array(keys, pa.int64()),
                    "x": [(change[k] or (0.0, 0.0))[0] for k in keys],
                    "y": [(change[k] or (0.0, 0.0))[1] for k in keys],
                    "_version": pa.array([seq] * len(keys), pa.int64()),
                    "_deleted": [change[k] is None for k in keys],
                }
            )
            stored.append(LogEntry("agents", 1, seq, 10 * seq, float(seq), rows))
        yield stored


def update(seq: int, entered=(), updated=(), left=(), full: bool = False) -> Update:
    def columns(rows) -> dict[str, np.ndarray]:
        if not rows:
            return {}
        return {
            "id": np.array([k for k, _ in rows], dtype=np.int64),
            "x": np.array([p[0] for _, p in rows]),
            "y": np.array([p[1] for _, p in rows]),
        }

    return Update(
        1,
        1,
        seq,
        10 * seq,
        full,
        columns(entered),
        columns(updated),
        np.array(left, dtype=np.int64),
        float(seq),
        0.0,
    )


GOOD = [
    update(0, entered=[(1, (1.0, 1.0)), (3, (5.0, 5.0))], full=True),
    update(1, entered=[(2, (3.0, 3.0))], updated=[(1, (2.0, 2.0))]),
    update(2, left=[3]),
    update(3, left=[1]),
]


def run(log, updates):
    return audit(updates, VIEW, key="id", index=("x", "y"), log=log, dataset="agents")


def test_a_faithful_sequence_is_clean(log) -> None:
    report = run(log, GOOD)
    assert report.clean, report.problems
    assert (report.delivered, report.first, report.last) == (4, 0, 3)
    assert report.held == {2}


def test_a_missing_seq_is_lost(log) -> None:
    report = run(log, [GOOD[0], GOOD[1], GOOD[3]])
    assert report.lost == 1
    assert not report.clean


def test_a_repeated_or_late_seq_is_counted(log) -> None:
    report = run(log, [GOOD[0], GOOD[1], GOOD[2], GOOD[1], GOOD[3]])
    assert report.duplicated == 1
    report = run(log, [GOOD[0], GOOD[2], GOOD[1], GOOD[3]])
    assert report.reordered == 1


def test_wrong_rows_are_mismatched(log) -> None:
    wrong = update(1, entered=[(2, (3.0, 3.5))], updated=[(1, (2.0, 2.0))])
    report = run(log, [GOOD[0], wrong, GOOD[2], GOOD[3]])
    assert report.mismatched == 1
    missing_left = update(2)
    report = run(log, [GOOD[0], GOOD[1], missing_left, GOOD[3]])
    assert report.mismatched >= 1
    assert "left" in report.problems[0]


def test_a_full_push_after_a_resync_restarts_the_replay(log) -> None:
    restart = update(3, entered=[(2, (3.0, 3.0))], full=True)
    report = run(log, [GOOD[0], GOOD[1], restart])
    assert report.clean, report.problems
    assert report.restarts == 1
    assert report.held == {2}


def sql_update(seq: int, entered=(), updated=(), left=(), full: bool = False) -> Update:
    def columns(rows) -> dict[str, np.ndarray]:
        if not rows:
            return {}
        return {"id": np.array([k for k, _ in rows]), "s": np.array([s for _, s in rows])}

    return Update(
        1, 1, seq, 10 * seq, full, columns(entered), columns(updated), np.array(left), 0.0, 0.0
    )


def test_a_sql_view_is_audited_with_its_query_run_on_each_logged_change(log) -> None:
    view = sql("SELECT id, x + y AS s FROM agents WHERE x < 10")
    faithful = [
        sql_update(0, entered=[(1, 2.0), (3, 10.0)], full=True),
        sql_update(1, entered=[(2, 6.0)], updated=[(1, 4.0)]),
        sql_update(2, left=[3]),  # deleted
        sql_update(3, left=[1]),  # x = 30: no longer selected
    ]
    report = audit(faithful, view, key="id", index=(), log=log, dataset="agents")
    assert report.clean, report.problems
    assert report.held == {2}
    wrong = [*faithful[:1], sql_update(1, entered=[(2, 6.0)], updated=[(1, 5.0)]), *faithful[2:]]
    report = audit(wrong, view, key="id", index=(), log=log, dataset="agents")
    assert report.mismatched == 1 and "rows [1]" in report.problems[0]


def test_a_sql_view_that_does_not_select_the_key_is_keyed_by_the_datasets_key(log) -> None:
    # The relay sends the key column in front of the query's own columns.
    view = sql("SELECT x + y AS s FROM agents WHERE x < 10")
    faithful = [
        sql_update(0, entered=[(1, 2.0), (3, 10.0)], full=True),
        sql_update(1, entered=[(2, 6.0)], updated=[(1, 4.0)]),
        sql_update(2, left=[3]),
        sql_update(3, left=[1]),
    ]
    report = audit(faithful, view, key="id", index=(), log=log, dataset="agents")
    assert report.clean, report.problems
    assert report.held == {2}
    late = [*faithful[:3], sql_update(3)]  # 1 moved out of the view but never left
    report = audit(late, view, key="id", index=(), log=log, dataset="agents")
    assert report.mismatched == 1 and "left [1]" in report.problems[0]


def test_null_is_only_null_and_nan_only_nan(tmp_path: Path) -> None:
    with SqliteLog(tmp_path / "log.db") as stored:
        rows = pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "x": [1.0, 2.0],
                "y": [1.0, 2.0],
                "v": pa.array([None, float("nan")], pa.float64()),
                "_version": pa.array([0, 0], pa.int64()),
                "_deleted": [False, False],
            }
        )
        stored.append(LogEntry("agents", 1, 0, 0, 0.0, rows))
        received = {
            "id": np.array([1, 2]),
            "x": np.array([1.0, 2.0]),
            "y": np.array([1.0, 2.0]),
            "v": np.ma.MaskedArray([0.0, np.nan], mask=[True, False]),
        }
        full = Update(1, 1, 0, 0, True, received, {}, np.array([], dtype=np.int64), 0.0, 0.0)
        report = run(stored, [full])
        assert report.clean, report.problems
        for wrong_v in (np.array([np.nan, np.nan]), np.ma.MaskedArray([0.0, 0.0], mask=[1, 1])):
            wrong = Update(1, 1, 0, 0, True, {**received, "v": wrong_v}, {}, np.array([]), 0.0, 0.0)
            assert run(stored, [wrong]).mismatched == 1


def test_the_sql_oracle_is_not_the_relays_query_engine() -> None:
    # The audit checks what relays send; it must not decide it with the relay's own code.
    code = (
        "import sys\n"
        "import fanout.testing.audit\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('fanout.relay', 'pyspark')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_rows_held_at_a_seq_are_what_a_latest_view_must_hold_then(log) -> None:
    found = audit(GOOD, VIEW, key="id", index=("x", "y"), log=log, dataset="agents", at={1, 3})
    assert set(found.rows_at) == {1, 3}
    assert found.rows_at[1] == {
        1: {"id": 1, "x": 2.0, "y": 2.0},
        2: {"id": 2, "x": 3.0, "y": 3.0},
        3: {"id": 3, "x": 5.0, "y": 5.0},
    }
    assert found.rows_at[3] == {2: {"id": 2, "x": 3.0, "y": 3.0}}
    expected = found.rows_at[1]
    assert latest_differences({k: dict(r) for k, r in expected.items()}, expected) == []
    held = {1: {"id": 1, "x": 1.0, "y": 1.0}, 2: expected[2], 9: {"id": 9, "x": 0.0, "y": 0.0}}
    assert latest_differences(held, expected) == [
        "missing [3] (1)",
        "extra [9] (1)",
        "different [1] (1)",
    ]
    # A projection holds fewer columns: only those it holds are compared.
    assert latest_differences({k: {"id": k} for k in expected}, expected) == []
