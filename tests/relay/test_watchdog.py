"""The time limit on the relay's DuckDB statements (relay/watchdog.py), on a real DuckDB."""

from __future__ import annotations

import duckdb
import pytest

from fanout.relay.watchdog import Watchdog


def test_a_statement_past_the_limit_is_interrupted_and_the_connection_lives_on() -> None:
    db = duckdb.connect()
    watchdog = Watchdog(0.1)
    endless = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range + b.range < 0"
    with pytest.raises(duckdb.InterruptException), watchdog.watching(db):
        db.sql(endless).fetchall()
    assert watchdog.interrupted == 1
    with watchdog.watching(db):
        assert db.sql("SELECT 42").fetchall() == [(42,)]
    db.close()


def test_statements_within_the_limit_are_left_alone() -> None:
    db = duckdb.connect()
    watchdog = Watchdog(5.0)
    for n in range(200):
        with watchdog.watching(db):
            assert db.sql(f"SELECT {n}").fetchall() == [(n,)]
    assert watchdog.interrupted == 0
    db.close()


@pytest.mark.parametrize("limit", [0.0, -1.0, float("inf"), float("nan")])
def test_a_limit_that_could_not_work_is_refused(limit: float) -> None:
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        Watchdog(limit)
