"""Benchmark the postgres source's capture: what each capture costs the table's writers, and how
fast each reader turns changes into Arrow batches.

Run ``.venv/bin/python bench/postgres.py`` (``--quick`` for a short run); it prints one JSON
object last and writes ``bench/results/postgres.json``. It starts a throwaway PostgreSQL server
of this machine's (as the tests do: Debian's ``postgresql`` package, ``wal_level = logical``),
so nothing else is needed.

Measures, on one table ``(order_id bigint key, customer text, amount double)`` per measurement:

* ``writes_per_s``: single-row ``INSERT ... ON CONFLICT UPDATE`` transactions per second, by 1
  and by 4 concurrent writers (threads, one connection each, random keys), with no capture, with
  the trigger (``capture = "trigger"``) and with logical decoding (``capture = "logical"``);
  while captured, a reader in another process reads and commits the changes (10,000 at most
  a read) at most every ``--pace`` s (0.5: a publisher reads once a micro-batch, and Spark's
  take a second and more), so the server's and the reader's work compete with the writers for
  this machine's cores; ``logical_eager`` (opt-in): the reader reads again as soon as a read
  ends; ``_unread``: the capture installed and its stream started, no reader (what the writers'
  own transactions pay). The configurations' tables and readers are set up once; the writers
  then take turns of 2 s at each table, the order rotated every turn, until each has had
  ``--seconds``; that is one run of ``--runs``; the median and the spread (min, max) over runs.
* ``*_writer_cost_ratio``: writes per second without capture / with it, per run (the same
  run's baseline), the median over runs; the headline is the worse of 1 and 4 writers.
* ``cpu``: per number of writers and configuration, where the CPU went during its turns (from
  ``/proc``): the reader's and the walsender's microseconds per change (the walsender: the
  server process streaming the slot, found by ``pg_replication_slots.active_pid``), the cores
  the machine, the server and every capture used (a slot's walsender decodes the whole server's
  WAL, so the other tables' turns too), and ``accounted_ratio``: the writers' CPU per write
  (their process's and the server's, walsenders taken out) against no capture's: what the
  writers' own transactions pay once the capture's CPU is set aside.
* ``walsender_us_per_change``: one writer's single-row upserts streamed to a client that drops
  every message: the walsender's CPU per change with pgoutput's text values, with ``binary``,
  for writes to a table outside the publication (decoded, not sent), and with text values
  read every 0.5 s rather than as they come.
* ``read_changes_per_s``: changes each reader reads and converts to Arrow per second, and its
  CPU per change (Spark not involved); also in single-row transactions, as the writers make.

The reader's pace A/B: ``--writers 4 --configurations logical,logical_eager`` (about 3 min);
the lead's full run (about 8 min): no options.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import select
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import psycopg2
from psycopg2.extras import LogicalReplicationConnection

from fanout.publisher.sources.pgoutput import lsn_of
from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_logical import LogicalStreamReader, capture_name, drop_slot
from fanout.publisher.sources.postgres_reader import ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.calibration import calibrate
from fanout.testing.capture import COLUMNS, SCHEMA
from fanout.testing.cpu import machine, process_tree, this_process
from fanout.testing.machine import describe, write_results
from fanout.testing.postgres import throwaway_postgres

RESULTS = Path(__file__).parent / "results" / "postgres.json"
#: Measured configurations: no capture; each capture read at a publisher's pace (``--pace``);
#: logical decoding read flat out (``_eager``); each capture unread.
CONFIGURATIONS = (
    "none",
    "trigger",
    "logical",
    "logical_eager",
    "trigger_unread",
    "logical_unread",
)
#: Measured unless ``--configurations`` says otherwise.
DEFAULT = ("none", "trigger", "logical", "trigger_unread", "logical_unread")
#: Seconds of one configuration's turn at writing.
SLICE = 2.0
_names = itertools.count()


def fresh_table(url: str, capture: str) -> str:
    name = f"bench_orders_{next(_names)}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            f"CREATE TABLE {name} (order_id bigint PRIMARY KEY, customer text, amount float8)"
        )
    if capture != "none":
        install(url, name, "order_id", COLUMNS, capture)
    return name


def stream_reader(
    url: str, table: str, capture: str, batch: int
) -> LogicalStreamReader | TriggerStreamReader:
    """The publisher's reader of ``table``'s changes (its ``read`` gives Arrow batches)."""
    if capture == "logical":
        options = ReaderOptions(url, table, "", batch, "order_id", "logical")
        return LogicalStreamReader(options, SCHEMA)
    return TriggerStreamReader(ReaderOptions(url, table, "", batch, "order_id"), SCHEMA)


def drain(url: str, table: str, capture: str, ready: Any, stop: Any, *, pace: float) -> None:
    """Read and commit the table's changes as the publisher does, until ``stop`` is set: a
    read at most every ``pace`` seconds (0: the next as soon as one ends)."""
    reader = stream_reader(url, table, capture, 10_000)
    offset = reader.initialOffset()
    ready.set()
    while not stop.is_set():
        began = time.monotonic()
        batches, end = reader.read(offset)
        if end == offset:
            time.sleep(max(0.1, pace))
            continue
        sum(b.num_rows for b in batches)
        reader.commit(end)
        offset = end
        time.sleep(max(0.0, began + pace - time.monotonic()))
    reader.stop()


class Captured:
    """A fresh table captured as ``configuration`` says, drained by a reader in another
    process unless ``_unread`` (its stream started, so a slot exists, but never read)."""

    def __init__(self, url: str, configuration: str, pace: float) -> None:
        self.url, self.configuration = url, configuration
        self.capture, _, how = configuration.partition("_")
        self.table = fresh_table(url, self.capture)
        spawn = multiprocessing.get_context("spawn")
        ready, self.stop_reading = spawn.Event(), spawn.Event()
        self.reading: Any = None
        if self.capture != "none" and how != "unread":
            every = 0.0 if how == "eager" else pace
            self.reading = spawn.Process(
                target=drain,
                args=(url, self.table, self.capture, ready, self.stop_reading),
                kwargs={"pace": every},
            )
            self.reading.start()
            if not ready.wait(300):
                raise RuntimeError(f"the {self.capture} reader did not start")
        elif self.capture != "none":
            reader = stream_reader(url, self.table, self.capture, 1)
            reader.initialOffset()
            reader.stop()

    def cpu(self, db: psycopg.Connection[Any]) -> dict[str, tuple[int, float]]:
        """CPU seconds used so far by its reader and by the server's walsender streaming its
        slot to it, each with its process id (what it lacks: none)."""
        found: dict[str, tuple[int, float]] = {}
        if self.reading is None:
            return found
        found["reader"] = (self.reading.pid, process_tree(self.reading.pid).seconds)
        if self.capture == "logical":
            (pid,) = db.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                (capture_name(self.url, self.table),),
            ).fetchone() or (None,)
            if pid is not None:
                found["walsender"] = (pid, process_tree(pid).seconds)
        return found

    def close(self) -> None:
        if self.reading is not None:
            self.stop_reading.set()
            self.reading.join(60)
        if self.capture == "logical":  # its slot would keep WAL for the rest of the run
            install(self.url, self.table, "order_id", COLUMNS, "trigger")


def writes(url: str, table: str, writers: int, seconds: float) -> tuple[int, float]:
    """Single-row upsert transactions by ``writers`` concurrent connections for ``seconds``:
    how many, in how many seconds."""
    done = [0] * writers
    stop = time.monotonic() + seconds

    def write(slot: int) -> None:
        rng = random.Random()
        with psycopg.connect(url, autocommit=True) as db:
            while time.monotonic() < stop:
                key = rng.randrange(10_000)
                db.execute(
                    f"INSERT INTO {table} VALUES (%s, 'c', %s) ON CONFLICT (order_id)"
                    " DO UPDATE SET amount = EXCLUDED.amount",
                    (key, rng.random()),
                )
                done[slot] += 1

    threads = [threading.Thread(target=write, args=(slot,)) for slot in range(writers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done), time.monotonic() - started


class Turns:
    """What one configuration's turns at writing added up to: transactions, seconds, and CPU
    seconds (the machine's, the server's, the writers' process's; each capture's reader and
    walsender, by configuration, for the reader of another configuration runs during this
    one's turns too)."""

    def __init__(self) -> None:
        self.writes, self.seconds = 0, 0.0
        self.cpu: dict[str, float] = {}

    def add(self, name: str, before: float, after: float) -> None:
        self.cpu[name] = self.cpu.get(name, 0.0) + after - before


def cpu_now(db: psycopg.Connection[Any], server: int, tables: list[Captured]) -> dict[str, Any]:
    """CPU seconds so far: the machine's, the server's (every backend), this process's (the
    writers' client side), and each capture's reader's and walsender's (with their pids)."""
    busy = machine()
    found: dict[str, Any] = {
        "machine": (0, busy.seconds if busy is not None else 0.0),
        "server": (0, process_tree(server).seconds),
        "writers_client": (0, this_process().seconds),
    }
    for captured in tables:
        for role, sample in captured.cpu(db).items():
            found[f"{captured.configuration}.{role}"] = sample
    return found


def writes_per_s(
    url: str,
    writers: int,
    seconds: float,
    runs: int,
    configurations: tuple[str, ...],
    *,
    pace: float,
) -> list[dict[str, Turns]]:
    """Per run, each configuration's turns by ``writers``: the configurations take turns of
    ``SLICE`` seconds (in an order rotated each turn) until each has had ``seconds``, so that
    the load of this shared machine falls on all of them alike."""
    tables = [Captured(url, configuration, pace) for configuration in configurations]
    db = psycopg.connect(url, autocommit=True)
    (backend,) = db.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    server = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    try:
        found: list[dict[str, Turns]] = []
        for _ in range(runs):
            turns = {c: Turns() for c in configurations}
            for turn in range(max(1, round(seconds / SLICE))):
                shift = turn % len(tables)
                for captured in tables[shift:] + tables[:shift]:
                    before = cpu_now(db, server, tables)
                    count, elapsed = writes(url, captured.table, writers, SLICE)
                    after = cpu_now(db, server, tables)
                    into = turns[captured.configuration]
                    into.writes += count
                    into.seconds += elapsed
                    for name, (pid, used) in after.items():
                        was_pid, was = before.get(name, (pid, 0.0))
                        into.add(name, was if was_pid == pid else 0.0, used)
            found.append(turns)
        return found
    finally:
        db.close()
        for captured in tables:
            captured.close()


def read_changes_per_s(
    url: str, capture: str, changes: int, batch: int, size: int = 1000
) -> dict[str, Any]:
    """Changes read and converted to Arrow per second, ``batch`` at a time (written in
    transactions of ``size`` rows), and the reader's CPU per change."""
    table = fresh_table(url, capture)
    reader = stream_reader(url, table, capture, batch)
    offset = reader.initialOffset()
    with psycopg.connect(url, autocommit=True) as db:
        for low in range(0, changes, size):
            with db.transaction(), db.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {table} VALUES (%s, 'c', %s)",
                    [(n, n * 0.5) for n in range(low, min(low + size, changes))],
                )
    started, read, cpu = time.perf_counter(), 0, this_process()
    while True:
        batches, end = reader.read(offset)
        rows = sum(b.num_rows for b in batches)
        if not rows:
            break
        reader.commit(end)
        offset, read = end, read + rows
    elapsed, used = time.perf_counter() - started, this_process().seconds - cpu.seconds
    reader.stop()
    if capture == "logical":
        install(url, table, "order_id", COLUMNS, "trigger")
    return {
        "changes": read,
        "batch": batch,
        "rows_per_transaction": size,
        "per_s": round(read / elapsed),
        "reader_us_per_change": round(used / max(1, read) * 1e6, 2),
    }


#: The walsender's streams compared by ``walsender_us_per_change``: pgoutput's options,
#: whether the writes are to the published table or to another (WAL decoded, nothing sent),
#: and whether the client waits on the stream for each message or reads every 0.5 s (as the
#: publisher's reader does, between micro-batches).
STREAMS: dict[str, tuple[dict[str, str], bool, float]] = {
    "text": ({}, True, 0.0),
    "binary": ({"binary": "true"}, True, 0.0),
    "unpublished_table": ({}, False, 0.0),
    "text_read_every_0.5_s": ({}, True, 0.5),
}


def walsender_us_per_change(url: str, tables: tuple[str, str], stream: str, changes: int) -> float:
    """The walsender's CPU per change while one writer makes ``changes`` single-row upserts,
    streamed as ``STREAMS[stream]`` says to a client that drops every message."""
    options, published, every = STREAMS[stream]
    slot = f"bench_walsender_{next(_names)}"
    connection = psycopg2.connect(url, connection_factory=LogicalReplicationConnection)
    cursor = connection.cursor()
    cursor.create_replication_slot(slot, output_plugin="pgoutput")
    publication = {"proto_version": "1", "publication_names": capture_name(url, tables[0])}
    cursor.start_replication(slot_name=slot, decode=False, options={**publication, **options})
    walsender, target, done = connection.get_backend_pid(), [0], threading.Event()

    def drop() -> None:  # read and drop until the server has sent the WAL up to ``target``
        while not (done.is_set() and cursor.wal_end >= target[0]):
            if every and not done.is_set():
                time.sleep(every)
                while cursor.read_message() is not None:
                    pass
            elif cursor.read_message() is None:
                if done.is_set():  # the writes are over: ask where the server is
                    cursor.send_feedback(reply=True, force=True)
                select.select([cursor], [], [], 0.05)

    dropping = threading.Thread(target=drop)
    dropping.start()
    before = process_tree(walsender)
    with psycopg.connect(url, autocommit=True) as db:
        for _ in range(changes):
            db.execute(
                f"INSERT INTO {tables[0 if published else 1]} VALUES (%s, 'c', %s)"
                " ON CONFLICT (order_id) DO UPDATE SET amount = EXCLUDED.amount",
                (random.randrange(10_000), random.random()),
            )
        (flushed,) = db.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone() or ("0/0",)
        target[0] = lsn_of(flushed)
        done.set()
        dropping.join()
        used = process_tree(walsender).seconds - before.seconds
        connection.close()
        drop_slot(db, url, slot)
    return used / changes * 1e6


def walsender_streams(url: str, changes: int, rounds: int) -> dict[str, dict[str, float]]:
    """``walsender_us_per_change`` of every stream of ``STREAMS``, taking turns, ``rounds``
    times: the median and the spread."""
    tables = (fresh_table(url, "logical"), fresh_table(url, "none"))
    found: dict[str, list[float]] = {stream: [] for stream in STREAMS}
    for _ in range(rounds):
        for stream in STREAMS:
            found[stream].append(walsender_us_per_change(url, tables, stream, changes))
    install(url, tables[0], "order_id", COLUMNS, "trigger")
    return {stream: summary(values) for stream, values in found.items()}


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def cpu_costs(runs: list[dict[str, Turns]]) -> dict[str, dict[str, float]]:
    """Per configuration, the medians over runs of where the CPU went during its turns:
    microseconds per write of its reader and walsender (its capture's own work), cores the
    machine, the server and all captures used, and the writers' CPU per write (their process's
    and the server's, walsenders taken out) against no capture's (``accounted_ratio``)."""
    found: dict[str, dict[str, list[float]]] = {}
    for turns in runs:
        base = _writers_cpu_per_write(turns["none"])
        for configuration, turn in turns.items():
            if not turn.writes:
                continue
            cpu, per_write = turn.cpu, 1e6 / turn.writes
            into = found.setdefault(configuration, {})
            figures = {
                "reader_us_per_change": cpu.get(f"{configuration}.reader", 0.0) * per_write,
                "walsender_us_per_change": cpu.get(f"{configuration}.walsender", 0.0) * per_write,
                "writers_us_per_write": _writers_cpu_per_write(turn) * 1e6,
                "machine_us_per_write": cpu.get("machine", 0.0) * per_write,
                "machine_cores": cpu.get("machine", 0.0) / turn.seconds,
                "server_cores": cpu.get("server", 0.0) / turn.seconds,
                "captures_cores": _captures(cpu) / turn.seconds,
                "accounted_ratio": _writers_cpu_per_write(turn) / base,
            }
            for name, value in figures.items():
                into.setdefault(name, []).append(value)
    return {
        configuration: {name: round(statistics.median(v), 3) for name, v in figures.items()}
        for configuration, figures in found.items()
    }


def _captures(cpu: dict[str, float]) -> float:
    """CPU seconds of every capture's reader and walsender."""
    return sum(v for name, v in cpu.items() if name.endswith((".reader", ".walsender")))


def _writers_cpu_per_write(turn: Turns) -> float:
    """The writers' CPU seconds per write: their process's and the server's, the walsenders
    taken out (the machine's would count the other jobs of a shared machine too)."""
    cpu = turn.cpu
    walsenders = sum(v for name, v in cpu.items() if name.endswith(".walsender"))
    used = cpu.get("writers_client", 0.0) + cpu.get("server", 0.0) - walsenders
    return used / max(1, turn.writes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per write measurement")
    parser.add_argument("--runs", type=int, default=3, help="rounds of every measurement")
    parser.add_argument("--changes", type=int, default=100_000, help="changes read")
    parser.add_argument(
        "--writers", default="1,4", help="numbers of concurrent writers, comma-separated"
    )
    parser.add_argument(
        "--configurations",
        default=",".join(DEFAULT),
        help=f"which of {','.join(CONFIGURATIONS)} (none is always measured)",
    )
    parser.add_argument(
        "--pace", type=float, default=0.5, help="seconds between a reader's reads (not _eager)"
    )
    parser.add_argument("--quick", action="store_true", help="a short run (not written)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.runs, args.changes = 2.0, 1, 10_000
    chosen = [c for c in args.configurations.split(",") if c != "none"]
    unknown = set(chosen) - set(CONFIGURATIONS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}")
    configurations = ("none", *chosen)
    counts = [int(n) for n in args.writers.split(",")]
    description, calibration = describe(), calibrate()
    rates: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    cpu: dict[str, dict[str, dict[str, float]]] = {}
    with throwaway_postgres() as url:
        for writers in counts:
            runs = writes_per_s(
                url, writers, args.seconds, args.runs, configurations, pace=args.pace
            )
            for turns in runs:
                none = turns["none"].writes / turns["none"].seconds
                for configuration, turn in turns.items():
                    rate = turn.writes / turn.seconds
                    rates.setdefault(f"{writers}_writers_{configuration}", []).append(rate)
                    if configuration != "none":
                        label = f"{configuration}_{writers}_writers"
                        ratios.setdefault(label, []).append(none / rate)
            cpu[f"{writers}_writers"] = cpu_costs(runs)
        reading = {
            capture: read_changes_per_s(url, capture, args.changes, 10_000)
            for capture in ("trigger", "logical")
        }
        reading["logical_single_row_transactions"] = read_changes_per_s(
            url, "logical", args.changes // 5, 10_000, size=1
        )
        walsender = walsender_streams(url, args.changes // 30, args.runs)
    cost = {label: summary(values) for label, values in ratios.items()}
    results: dict[str, Any] = {
        "benchmark": "postgres",
        "machine": description,
        "calibration": calibration,
        "seconds_per_write_measurement": args.seconds,
        "runs": args.runs,
        "pace_s": args.pace,
        "writes_per_s": {label: summary(values) for label, values in rates.items()},
        "writer_cost": cost,
        "cpu": cpu,
        "read_changes_per_s": reading,
        "walsender_us_per_change": walsender,
    }
    for configuration in chosen:
        worst = max(cost[f"{configuration}_{writers}_writers"]["median"] for writers in counts)
        results[f"{configuration}_writer_cost_ratio"] = worst
    write_results(results, None if args.quick else args.out)


if __name__ == "__main__":
    main()
