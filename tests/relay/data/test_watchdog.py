"""The time limit on the relay's DuckDB statements (relay/data/watchdog.py), on a real DuckDB."""

from __future__ import annotations

import time

import duckdb
import pytest

from fanout.relay.data import watchdog as watchdog_module
from fanout.relay.data.watchdog import Watchdog


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


def test_the_thread_ends_when_idle_and_starts_again_for_the_next_statement(monkeypatch) -> None:
    monkeypatch.setattr(watchdog_module, "IDLE_EXIT", 0.05)
    db = duckdb.connect()
    watchdog = Watchdog(0.1)
    with watchdog.watching(db):
        db.sql("SELECT 1").fetchall()
    first = watchdog._thread
    assert first is not None
    first.join(5)
    assert not first.is_alive() and watchdog._thread is None
    # From here the thread must outlive the assertion below, on a loaded machine too.
    monkeypatch.setattr(watchdog_module, "IDLE_EXIT", 30.0)
    endless = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE a.range + b.range < 0"
    with pytest.raises(duckdb.InterruptException), watchdog.watching(db):
        db.sql(endless).fetchall()  # the new thread still keeps time
    assert watchdog._thread is not None and watchdog._thread is not first
    db.close()


def test_an_interrupt_that_was_lost_is_sent_again_until_the_statement_ends() -> None:
    """DuckDB drops an interrupt that comes between binding a statement and running it: the
    watchdog interrupts again until the statement is disarmed, counting the statement once."""

    class Connection:  # stands for a DuckDB connection whose first interrupts were lost
        def __init__(self) -> None:
            self.interrupts = 0

        def interrupt(self) -> None:
            self.interrupts += 1

    db = Connection()
    watchdog = Watchdog(0.01)
    with watchdog.watching(db):  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while db.interrupts < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert db.interrupts >= 3
    assert watchdog.interrupted == 1
    after = db.interrupts
    time.sleep(3 * watchdog_module.REPEAT)
    assert db.interrupts == after  # disarmed: none after the statement ended
