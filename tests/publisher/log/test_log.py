"""The publisher's batch log: durable, idempotent, gaps reported (US 7,487,246; issue 5).

Every test runs on both backends (SQLite, and PostgreSQL on a throwaway server). The stateful
test drives a log and a brute-force in-memory oracle with the same random appends (duplicates
and re-runs included), reads, trims, retention and reopenings, and checks that they agree.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from fanout.errors import BadRequest, ConfigError
from fanout.publisher.log import (
    BatchLog,
    Gap,
    LogEntry,
    LogGap,
    PostgresLog,
    Retention,
    SqliteLog,
    check_log_url,
    decode_rows,
    encode_rows,
    open_log,
)

FreshUrl = Callable[[], str]
_schemas = count()


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> FreshUrl:
    """Makes URLs of empty logs: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        files = count()
        return lambda: f"sqlite:///{tmp_path}/log-{next(files)}.db"
    dsn = request.getfixturevalue("postgres_dsn")
    return lambda: fresh_postgres_url(dsn)


def fresh_postgres_url(dsn: str) -> str:
    """The URL of an empty log in a new schema of the server at ``dsn``."""
    schema = f"log_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    return f"{dsn}?options=-csearch_path%3D{schema}"


@pytest.fixture
def log(fresh_url: FreshUrl) -> Iterator[BatchLog]:
    with open_log(fresh_url()) as opened:
        yield opened


def changed_rows(seq: int, size: int = 3, variant: int = 0) -> pa.Table:
    """A micro-batch's changed rows: declared columns, ``_version``, ``_deleted``; nulls."""
    ids = [seq * 100 + i for i in range(size)]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array([i / 7 + variant for i in ids], pa.float64()),
            "kind": pa.array([None if i % 3 == 0 else i % 5 for i in ids], pa.int32()),
            "name": pa.array([None if i % 4 == 1 else f"é{i}-{variant}" for i in ids]),
            "_version": pa.array([seq] * size, pa.int64()),
            "_deleted": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
        }
    )


def entry(seq: int, dataset: str = "agents", epoch: int = 1, size: int = 3) -> LogEntry:
    return LogEntry(dataset, epoch, seq, seq * 10, 1000.0 + seq, changed_rows(seq, size))


def assert_same(got: LogEntry, expected: LogEntry) -> None:
    assert (got.dataset, got.epoch, got.seq, got.tick, got.tick_time) == (
        expected.dataset,
        expected.epoch,
        expected.seq,
        expected.tick,
        expected.tick_time,
    )
    assert got.rows.schema.equals(expected.rows.schema, check_metadata=True)
    assert got.rows.equals(expected.rows)


# --- behaviour, example by example -------------------------------------------------------------


def test_an_appended_entry_reads_back(log: BatchLog) -> None:
    for seq in range(5):
        log.append(entry(seq))
    got = list(log.read("agents", 1, 1, 3))
    assert [e.seq for e in got] == [1, 2, 3]
    for one in got:
        assert_same(one, entry(one.seq))
    assert log.bounds("agents", 1) == (0, 4)
    assert log.bounds("agents", 2) is None
    assert list(log.read("agents", 1, 4, 3)) == []


def test_a_rerun_micro_batch_is_a_noop_and_the_first_write_wins(log: BatchLog) -> None:
    first = entry(7)
    log.append(first)
    log.append(first)
    log.append(LogEntry("agents", 1, 7, 99, 5.0, changed_rows(7, size=9, variant=1)))
    (got,) = log.read("agents", 1, 7, 7)
    assert_same(got, first)
    assert log.bounds("agents", 1) == (7, 7)


TABLES = {
    "every type, nulls": pa.table(
        {
            "i64": pa.array([1, None, -(2**63)], pa.int64()),
            "i32": pa.array([None, 2, 3], pa.int32()),
            "f64": pa.array([0.1, None, float("inf")], pa.float64()),
            "f32": pa.array([1.5, 2.5, None], pa.float32()),
            "flag": pa.array([True, None, False], pa.bool_()),
            "text": pa.array(["", None, "日本語 \x00 ✓"], pa.string()),
            "big": pa.array(["a" * 10_000, "b", None], pa.large_string()),
            "ts": pa.array([0, None, 1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
        }
    ),
    "no rows": changed_rows(0, size=0),
    "no columns": pa.table({}),
    "several chunks": pa.concat_tables([changed_rows(1), changed_rows(2), changed_rows(3)]),
    "schema metadata": changed_rows(4).replace_schema_metadata({"dataset": "agents"}),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_arrow_tables_round_trip_exactly(log: BatchLog, name: str) -> None:
    rows = TABLES[name]
    log.append(LogEntry("agents", 1, 0, 0, 0.0, rows))
    (got,) = log.read("agents", 1, 0, 0)
    assert got.rows.schema.equals(rows.schema, check_metadata=True)
    assert got.rows.equals(rows)
    assert got.rows.to_pylist() == rows.to_pylist()


def test_reading_a_trimmed_range_names_the_gap(log: BatchLog) -> None:
    for seq in range(10):
        log.append(entry(seq))
    assert log.trim("agents", 1, below=5) == 5
    assert log.bounds("agents", 1) == (5, 9)
    with pytest.raises(LogGap) as caught:
        log.read("agents", 1, 2, 7)
    assert caught.value.gaps == (Gap(2, 4, "trimmed"),)
    assert str(caught.value) == "agents epoch 1: seqs 2..4 were trimmed (the log holds seqs 5..9)"
    assert isinstance(caught.value, BadRequest)
    with pytest.raises(LogGap, match=r"seq 4 was trimmed, seqs 10\.\.11 are not logged yet"):
        log.read("agents", 1, 4, 11)


def test_a_micro_batch_never_appended_is_a_gap_too(log: BatchLog) -> None:
    for seq in (3, 4, 6):
        log.append(entry(seq))
    with pytest.raises(LogGap) as caught:
        log.read("agents", 1, 0, 6)
    assert caught.value.gaps == (Gap(0, 2, "never logged"), Gap(5, 5, "never logged"))


def test_a_rerun_below_the_trim_point_does_not_reappear(log: BatchLog) -> None:
    for seq in range(4):
        log.append(entry(seq))
    log.trim("agents", 1, below=3)
    log.append(entry(1))
    assert log.bounds("agents", 1) == (3, 3)
    assert log.trim("agents", 1, below=3) == 0


def test_a_trim_during_a_replay_stops_it_with_the_gap(log: BatchLog) -> None:
    for seq in range(30):
        log.append(entry(seq))
    replay = log.read("agents", 1, 0, 29)
    assert next(replay).seq == 0
    log.trim("agents", 1, below=20)
    with pytest.raises(LogGap, match="trimmed"):
        list(replay)


def test_retention_drops_old_and_surplus_entries_but_not_what_holders_need(log: BatchLog) -> None:
    for seq in range(10):
        log.append(entry(seq))  # tick_time 1000 + seq
    log.append(entry(0, dataset="orders"))
    needed = {("agents", 1): 2}
    assert log.apply_retention(Retention(max_entries=3, floor=needed), now=0.0) == 2
    assert log.bounds("agents", 1) == (2, 9)
    assert log.bounds("orders", 1) == (0, 0)
    assert log.apply_retention(Retention(max_entries=3), now=0.0) == 5
    assert log.bounds("agents", 1) == (7, 9)
    assert log.apply_retention(Retention(max_age_seconds=1.5), now=1009.0) == 2
    assert log.bounds("agents", 1) == (8, 9)
    assert log.bounds("orders", 1) is None
    assert log.apply_retention(Retention(), now=1e12) == 0


def test_retention_limits_must_not_be_negative() -> None:
    with pytest.raises(ConfigError, match="max_entries"):
        Retention(max_entries=-1)
    with pytest.raises(ConfigError, match="max_age_seconds"):
        Retention(max_age_seconds=float("nan"))


def test_a_closed_log_refuses_work(fresh_url: FreshUrl) -> None:
    log = open_log(fresh_url())
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.append(entry(0))


def test_concurrent_appends_trims_and_reads_agree(log: BatchLog) -> None:
    total, errors = 150, []
    done = threading.Event()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the main thread below
                errors.append(exc)

        return run

    def append_all() -> None:
        try:
            for seq in range(total):
                log.append(entry(seq))
        finally:
            done.set()

    def trim_behind() -> None:
        while not done.is_set():
            bounds = log.bounds("agents", 1)
            if bounds is not None:
                log.trim("agents", 1, below=bounds[1] - 20)

    threads = [threading.Thread(target=guarded(job)) for job in (append_all, trim_behind)]
    for thread in threads:
        thread.start()
    replays = 0
    try:
        while not errors and (not done.is_set() or replays == 0):
            bounds = log.bounds("agents", 1)
            if bounds is None:
                continue
            try:
                got = list(log.read("agents", 1, *bounds))
            except LogGap as gap:
                assert {one.reason for one in gap.gaps} == {"trimmed"}, gap
                continue
            assert [one.seq for one in got] == list(range(bounds[0], bounds[1] + 1))
            assert_same(got[-1], entry(bounds[1]))
            replays += 1
    finally:
        done.set()  # stops the trimmer whatever happened here
        for thread in threads:
            thread.join()
    assert errors == []
    final = log.bounds("agents", 1)
    assert final is not None
    assert final[1] == total - 1


# --- durability: a writer killed with SIGKILL right after append returns -------------------------

WRITER = """
import sys
import pyarrow as pa
from fanout.publisher.log import LogEntry, decode_rows, open_log
url, rows = sys.argv[1], open(sys.argv[2], "rb").read()
open_log(url).append(LogEntry("agents", 7, 42, 420, 1234.5, decode_rows(rows)))
print("appended", flush=True)
sys.stdin.read()
"""
READER = """
import sys
from fanout.publisher.log import encode_rows, open_log
with open_log(sys.argv[1]) as log:
    (got,) = log.read("agents", 7, 42, 42)
    print(got.tick, got.tick_time)
    open(sys.argv[2], "wb").write(encode_rows(got.rows).to_pybytes())
"""


def test_an_append_survives_the_writer_being_killed(fresh_url: FreshUrl, tmp_path: Path) -> None:
    url, rows = fresh_url(), changed_rows(5, size=2_000)
    sent, back = tmp_path / "sent.arrows", tmp_path / "back.arrows"
    sent.write_bytes(encode_rows(rows).to_pybytes())
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(sent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "appended\n"
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    reader = subprocess.run(
        [sys.executable, "-c", READER, url, str(back)], capture_output=True, text=True, check=True
    )
    assert reader.stdout.split() == ["420", "1234.5"]
    assert decode_rows(back.read_bytes()).equals(rows)


def test_sqlite_commits_are_fsynced_in_wal_mode(tmp_path: Path) -> None:
    with SqliteLog(tmp_path / "log.db") as log:
        log.append(entry(0))
        assert isinstance(log, SqliteLog)
        assert log._writer.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    with sqlite3.connect(tmp_path / "log.db") as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_postgres_commits_wait_for_the_wal_whatever_the_server_default(
    postgres_dsn: str,
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("ALTER DATABASE postgres SET synchronous_commit = off")
        try:
            with PostgresLog(postgres_dsn) as log:
                assert isinstance(log, PostgresLog)
                setting = log._writer.execute("SHOW synchronous_commit").fetchone()
                assert setting == ("on",)
        finally:
            admin.execute("ALTER DATABASE postgres RESET synchronous_commit")


def test_postgres_log_reconnects_when_the_server_drops_it(postgres_dsn: str) -> None:
    url = fresh_postgres_url(postgres_dsn)
    with open_log(url) as log:
        log.append(entry(0))
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'fanout-log'"
            ).fetchall()
        assert dropped == [(True,), (True,)]  # the log's write and read connections
        log.append(entry(1))
        assert [one.seq for one in log.read("agents", 1, 0, 1)] == [0, 1]


# --- URLs -----------------------------------------------------------------------------------------


def test_open_log_takes_absolute_and_relative_sqlite_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_log(f"sqlite:///{tmp_path}/abs/log.db") as log:
        assert isinstance(log, SqliteLog)
        log.append(entry(0))
    assert (tmp_path / "abs" / "log.db").exists()
    monkeypatch.chdir(tmp_path)
    with open_log("sqlite:rel/log.db") as log:
        log.append(entry(0))
    assert (tmp_path / "rel" / "log.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://db/x",
        "",
        "log.db",
        "postgresql:db",
        "sqlite:",
        "sqlite::memory:",
        "sqlite://host/x.db",
        "sqlite:d/",
    ],
)
def test_open_log_names_a_bad_url(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_log_url(url)
    assert repr(url) in str(caught.value)
    with pytest.raises(ConfigError, match=re.escape(repr(url))):
        open_log(url)


def test_open_log_masks_the_password_of_an_unreachable_server() -> None:
    with pytest.raises(ConfigError, match=r"fanout:\*\*\*@127\.0\.0\.1:1/") as caught:
        open_log("postgresql://fanout:hunter2@127.0.0.1:1/postgres?connect_timeout=2")
    assert "hunter2" not in str(caught.value)
    for url in ("postgresql://fanout:hunter2@[::1/postgres", "mysql://fanout:hunter2@db/x"):
        with pytest.raises(ConfigError, match=r"fanout:\*\*\*@") as caught:
            open_log(url)
        assert "hunter2" not in str(caught.value)


def test_open_log_on_postgres(postgres_dsn: str) -> None:
    with open_log(postgres_dsn.replace("postgresql://", "postgres://")) as log:
        assert isinstance(log, PostgresLog)


# --- the log against a brute-force oracle ---------------------------------------------------------

STREAMS = [("agents", 1), ("agents", 2), ("orders", 1)]
streams = st.sampled_from(STREAMS)
seqs = st.integers(0, 12)


class Oracle:
    """What the log must hold: entries per stream, and how far each stream was trimmed."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], dict[int, LogEntry]] = {s: {} for s in STREAMS}
        self.trimmed: dict[tuple[str, int], int] = dict.fromkeys(STREAMS, 0)

    def append(self, one: LogEntry) -> None:
        stream = (one.dataset, one.epoch)
        if one.seq not in self.entries[stream] and one.seq >= self.trimmed[stream]:
            self.entries[stream][one.seq] = one

    def bounds(self, stream: tuple[str, int]) -> tuple[int, int] | None:
        held = self.entries[stream]
        return (min(held), max(held)) if held else None

    def read(self, stream: tuple[str, int], first: int, last: int) -> list[LogEntry] | list[Gap]:
        held = self.entries[stream]
        missing = [seq for seq in range(first, last + 1) if seq not in held]
        if not missing:
            return [held[seq] for seq in range(first, last + 1)]
        top = max(held, default=None)
        reasons = [self.reason(stream, seq, top) for seq in missing]
        gaps: list[Gap] = []
        for seq, reason in zip(missing, reasons, strict=True):
            if gaps and gaps[-1].last == seq - 1 and gaps[-1].reason == reason:
                gaps[-1] = Gap(gaps[-1].first, seq, reason)
            else:
                gaps.append(Gap(seq, seq, reason))
        return gaps

    def reason(self, stream: tuple[str, int], seq: int, top: int | None) -> str:
        if seq < self.trimmed[stream]:
            return "trimmed"
        return "never logged" if top is not None and seq < top else "not logged yet"

    def trim(self, stream: tuple[str, int], below: int) -> int:
        dropped = [seq for seq in self.entries[stream] if seq < below]
        for seq in dropped:
            del self.entries[stream][seq]
        if dropped:
            self.trimmed[stream] = max(self.trimmed[stream], max(dropped) + 1)
        return len(dropped)

    def retain(self, policy: Retention, now: float) -> int:
        dropped = 0
        for stream, held in self.entries.items():
            order = sorted(held)
            keep_from, young_seen = len(order), False
            for index, seq in enumerate(order):
                if policy.max_age_seconds is not None:
                    young_seen |= held[seq].tick_time >= now - policy.max_age_seconds
                old = policy.max_age_seconds is not None and not young_seen
                surplus = policy.max_entries is not None and index < len(order) - policy.max_entries
                if not (old or surplus) or seq >= policy.floor.get(stream, seq + 1):
                    keep_from = index
                    break
            if keep_from:
                dropped += self.trim(stream, order[keep_from - 1] + 1)
        return dropped


class LogMachine(RuleBasedStateMachine):
    """Random appends, re-runs, reads, trims, retention and reopenings, checked by ``Oracle``."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.oracle = Oracle()
        self.log = open_log(url)

    @initialize()
    def start_empty(self) -> None:
        assert all(self.log.bounds(*stream) is None for stream in STREAMS)

    @rule(
        stream=streams,
        seq=seqs,
        tick_time=st.integers(0, 100),
        size=st.integers(0, 4),
        variant=st.integers(0, 3),
    )
    def append(
        self, stream: tuple[str, int], seq: int, tick_time: int, size: int, variant: int
    ) -> None:
        rows = changed_rows(seq, size, variant)
        one = LogEntry(stream[0], stream[1], seq, seq * 10 + variant, float(tick_time), rows)
        self.log.append(one)
        self.oracle.append(one)

    @precondition(lambda self: any(self.oracle.entries.values()))
    @rule(data=st.data())
    def rerun(self, data: st.DataObject) -> None:
        held = [one for entries in self.oracle.entries.values() for one in entries.values()]
        self.log.append(data.draw(st.sampled_from(held)))

    @rule(stream=streams, first=st.integers(-1, 13), length=st.integers(-1, 8))
    def read(self, stream: tuple[str, int], first: int, length: int) -> None:
        last = first + length - 1
        expected = self.oracle.read(stream, first, last)
        try:
            got: list[LogEntry] | list[Gap] = list(self.log.read(*stream, first, last))
        except LogGap as gap:
            got = list(gap.gaps)
        assert len(got) == len(expected)
        for one, want in zip(got, expected, strict=True):
            if isinstance(want, LogEntry):
                assert isinstance(one, LogEntry)
                assert_same(one, want)
            else:
                assert one == want

    @rule(stream=streams, below=st.integers(0, 14))
    def trim(self, stream: tuple[str, int], below: int) -> None:
        assert self.log.trim(*stream, below) == self.oracle.trim(stream, below)

    @rule(
        max_age=st.none() | st.integers(0, 60),
        max_entries=st.none() | st.integers(0, 6),
        floor=st.dictionaries(streams, seqs, max_size=3),
        now=st.integers(0, 160),
    )
    def retain(
        self,
        max_age: int | None,
        max_entries: int | None,
        floor: dict[tuple[str, int], int],
        now: int,
    ) -> None:
        policy = Retention(max_age, max_entries, floor)
        assert self.log.apply_retention(policy, float(now)) == self.oracle.retain(policy, now)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = open_log(self.url)

    @invariant()
    def same_bounds(self) -> None:
        for stream in STREAMS:
            assert self.log.bounds(*stream) == self.oracle.bounds(stream)

    def teardown(self) -> None:
        self.log.close()


def test_the_log_behaves_like_its_oracle(fresh_url: FreshUrl) -> None:
    run_state_machine_as_test(
        lambda: LogMachine(fresh_url()),
        settings=settings(max_examples=30, stateful_step_count=30),
    )
