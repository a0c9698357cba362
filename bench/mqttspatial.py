"""The relay benchmark's spatial workload three ways (``bench/mqtt.py --spatial``): per-cell
topics on Mosquitto, box views on one fanout relay, and the same per-cell topics on the relay's
MQTT listener; the most subscribers each holds at 10 Hz, and the broker's CPU per useful row.

The world is ``fanout.testing.world``'s (ENTITIES points in a 4,000 x 4,000 world, every one
moving every tick, 10 ticks a second); each subscriber holds a 125 x 125 box at a random place
(the boxes stay put). The pure parts (boxes, cells, counting, verdicts, the search) are in
``fanout.testing.spatial``.

* **mosquitto** and **relay_mqtt**: the world cut into 125 x 125 cells, one topic each; every
  tick a publisher sends each cell's rows as one QoS 0 message: a Python process steps the world
  and sorts the rows by cell with numpy, a compiled one (``bench/mqttload.c`` over libmosquitto)
  publishes the 1,024 messages. A subscriber subscribes to the up to four cells its box overlaps.
  ``relay_mqtt`` is ``fanout relay --mqtt-port`` (an idle scripted publisher upstream).
* **relay**: the scripted publisher of ``bench/relay.py`` (``publisher_main``: each tick the
  rows inside the relay's primitives) and ``fanout relay``; a subscriber holds its box as a
  view at 10 pushes a second.

The subscribers are compiled and spread over ``--processes`` processes: MQTT ones in C over
libmosquitto (``mqttload subscribe``: every connection on one epoll set), relay ones over
picows (``bench/boxclients.py``, pushes decoded in bulk with numpy). Each counts what it got in
the window (distinct ticks, rows, rows inside its box, bytes on its socket) and each message's
latency from the tick's send to receipt. Per trial the broker's, the publisher's and each
client process's CPU are sampled over the window: a trial where a process of the benchmark's
own used more than 0.8 of a core is invalid (``fanout.testing.spatial.judge``), and the search
stops there, saying so (``bound``: ``clients``), rather than charge the broker with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from fanout.launch import running
from fanout.testing import cc, cpu
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.spatial import CELLS, Search, Verdict, boxes, cells_of, judge, tick_block
from fanout.testing.world import TICK_RATE, Entities, publisher_main
from fanout.wire.messages import Catalog

HERE = Path(__file__).parent
DRAIN = 1.0  # seconds after the window for its last messages to arrive
READY_TIMEOUT = 180.0  # seconds a client process may take to connect and subscribe everyone
CASES = ("mosquitto", "relay", "relay_mqtt")
NOTE = (
    "the brokers, the publisher and the compiled clients share the machine's cores (each"
    " trial's CPU says how: broker_cores, publisher_cores, client_cores per process,"
    " machine_cores with other tenants); a trial where a process of the benchmark's own used"
    " more than 0.8 of a core is invalid and ends the search (bound: clients); on a loaded"
    " machine (load_average_1m) p99 measures the load as much as the broker, CPU per useful row"
    " much less so"
)
NEEDS = (
    "bench/mqtt.py --spatial builds its MQTT clients in C against libmosquitto: install a C"
    " compiler and libmosquitto's headers (Debian: apt-get install gcc libmosquitto-dev)"
)


def build_load(into: Path) -> Path:
    """Compile ``bench/mqttload.c`` into ``into``; say clearly if cc or libmosquitto is missing."""
    return cc.build(HERE / "mqttload.c", into, ["-lmosquitto"], NEEDS)


# -- publishers -----------------------------------------------------------------------------


def cells_main(conn: Connection, port: int, entities: int, load: str) -> None:
    """The per-cell publisher process: each tick, step the world, sort its rows by cell (numpy)
    and hand them to ``mqttload publish``, which publishes one message a cell. Answers the
    coordinator's ``report`` (the ticks sent, with their send times) until ``stop``."""
    world = Entities(entities)
    command = [load, "publish", LOOPBACK, str(port), str(CELLS)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as publisher:
        assert publisher.stdin is not None and publisher.stdout is not None
        if not publisher.stdout.readline():
            raise RuntimeError("mqttload publish did not connect")
        conn.send("ready")
        period, next_tick, tick = 1.0 / TICK_RATE, time.monotonic(), 0
        sent: list[tuple[int, float]] = []  # (tick, when sent)
        while True:
            next_tick += period
            while conn.poll(max(0.0, next_tick - time.monotonic())):
                if conn.recv() == "report":
                    conn.send(sent)
                else:
                    publisher.stdin.close()
                    return
            world.step(period)
            tick += 1
            now = time.time()
            publisher.stdin.write(tick_block(tick, now, world.ids, world.xy))
            publisher.stdin.flush()
            sent.append((tick, now))


@dataclass
class Publisher:
    """A publisher process the coordinator drives through a pipe (``report``, ``stop``)."""

    process: Any
    conn: Connection

    async def sent(self) -> list[tuple[int, float]]:
        """(tick, send time) of every tick it sent so far."""
        self.conn.send("report")
        report = await asyncio.get_running_loop().run_in_executor(None, self.conn.recv)
        return list(report["sent"] if isinstance(report, dict) else report)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


@contextlib.contextmanager
def publisher_process(target: Callable[..., None], *args: Any) -> Any:
    """``target(conn, *args)`` in a process of its own, until the block ends; it sends one
    message when ready (the world publisher its URL)."""
    context = mp.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=target, args=(there, *args), daemon=True)
    process.start()
    there.close()
    publisher = Publisher(process, here)
    try:
        yield publisher, here.recv()
    finally:
        publisher.stop()


# -- brokers --------------------------------------------------------------------------------


@dataclass
class Case:
    """A contender ready for trials: its broker, its publisher, how its clients start."""

    name: str
    broker_pid: int
    publisher: Publisher
    clients: list[str]  # the client process's command
    topics: bool  # do its subscribers subscribe to cell topics


@contextlib.contextmanager
def mosquitto() -> Any:
    """One Mosquitto on a free loopback port: (port, pid)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fanout-mosquitto-") as home:
        config = Path(home) / "mosquitto.conf"
        config.write_text(f"listener {port} {LOOPBACK}\nallow_anonymous true\n")
        process = subprocess.Popen(["mosquitto", "-c", str(config)], stderr=subprocess.DEVNULL)
        try:
            _wait_port(port)
            yield port, process.pid
        finally:
            process.terminate()
            process.wait(10)


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((LOOPBACK, port), 0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextlib.asynccontextmanager
async def case(name: str, entities: int, load: Path, logs: Path) -> AsyncIterator[Case]:
    """Start contender ``name``'s broker and publisher; stop them when the block ends."""
    mqtt_clients = [str(load), "subscribe", LOOPBACK]
    if name == "mosquitto":
        with (
            mosquitto() as (port, pid),
            publisher_process(cells_main, port, entities, str(load)) as (publisher, _),
        ):
            yield Case(name, pid, publisher, [*mqtt_clients, str(port)], True)
    elif name == "relay_mqtt":
        port = free_port()
        async with serving(ScriptedPublisher(Catalog([]))) as url:
            args = ["--publisher", url, "--port", "0", "--mqtt-port", str(port)]
            args += ["--workers", "1"]  # one process, as Mosquitto is
            args += ["--read-rate", "0"]  # the cells publisher sends 10,240 messages a second
            async with running("relay", args, logs / "relay_mqtt.log") as relay:
                with publisher_process(cells_main, port, entities, str(load)) as (publisher, _):
                    yield Case(name, relay.pid, publisher, [*mqtt_clients, str(port)], True)
    else:
        with publisher_process(publisher_main, entities) as (publisher, url):
            args = ["--publisher", url, "--port", "0", "--workers", "1"]
            async with running("relay", args, logs / "relay.log") as relay:
                command = [sys.executable, str(HERE / "boxclients.py"), relay.url]
                yield Case(name, relay.pid, publisher, command, False)


# -- trials ---------------------------------------------------------------------------------


class Clients:
    """One client process: its subscribers' lines in, ``ready``, the window, its report out."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, command: list[str], lines: list[str], log: Path) -> Clients:
        with log.open("ab") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                limit=1 << 30,  # the last line holds every latency
            )
        clients = cls(process)
        clients.write(f"{len(lines)}\n" + "".join(f"{line}\n" for line in lines))
        return clients

    def write(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode())

    async def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            await self.process.wait()
            raise RuntimeError(f"a client process exited ({self.process.returncode}): see its log")
        found: dict[str, Any] = json.loads(line)
        return found

    async def report(self, count: int) -> tuple[list[dict[str, Any]], list[float]]:
        """Each subscriber's counts and every latency sample (ms)."""
        subscribers = [await self.line() for _ in range(count)]
        return subscribers, (await self.line())["latencies_ms"]

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()


@dataclass
class Trial:
    """One N: what was measured, and the verdict (``fanout.testing.spatial.judge``)."""

    subscribers: int
    verdict: Verdict = "fail"
    delivered_min: float = 0.0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    lost: int = 0
    useful_fraction: float = 0.0
    useful_rows_per_s: float = 0.0
    messages_per_s: float = 0.0
    bytes_per_useful_row: float = math.nan
    broker_cores: float = 0.0
    broker_cpu_us_per_useful_row: float = math.nan
    publisher_cores: float = 0.0
    client_cores: list[float] = field(default_factory=list)
    machine_cores: float = math.nan
    load_average: float = 0.0
    trial_s: float = 0.0  # wall-clock seconds the trial took, connecting included
    error: str = ""  # why the subscribers could not all be subscribed, if so


def lines_for(chosen: list[tuple[float, float, float, float]], topics: bool) -> list[str]:
    """The client process's input lines: a box and, for MQTT, its cells' topics."""
    out = []
    for box in chosen:
        cells = cells_of(box) if topics else []
        out.append(" ".join([*(f"{v:.3f}" for v in box), str(len(cells)), *cells]))
    return out


async def trial(contender: Case, n: int, args: Any, logs: Path) -> Trial:
    """``n`` subscribers of ``contender``: connect, warm up, measure a window, judge."""
    began = time.monotonic()
    everyone = boxes(n, seed=n)
    count = min(args.processes, n)
    groups = [everyone[i::count] for i in range(count)]
    log = logs / f"{contender.name}-{n}-clients.log"
    clients: list[Clients] = []
    try:
        for group in groups:
            clients.append(
                await Clients.start(contender.clients, lines_for(group, contender.topics), log)
            )
        try:
            for client in clients:
                await asyncio.wait_for(client.line(), READY_TIMEOUT)
        except (TimeoutError, RuntimeError) as exc:  # the broker refused or dropped them
            why = f"not every subscriber got subscribed: {exc or 'timeout'}; see {log}"
            print(f"spatial {contender.name} {n}: {why}", file=sys.stderr, flush=True)
            return Trial(n, "fail", lost=n, error=why, load_average=os.getloadavg()[0])
        start = time.time() + args.warmup
        end = start + args.window
        for client in clients:
            client.write(f"window {start:.6f} {end:.6f} {DRAIN}\n")
        samples = []
        for moment in (start, end):
            await asyncio.sleep(max(0.0, moment - time.time()))
            samples.append(sample(contender, clients))
        reports = [
            await client.report(len(group)) for client, group in zip(clients, groups, strict=True)
        ]
    finally:
        for client in clients:
            await client.stop()
    sent = await contender.publisher.sent()
    result = evaluate(Trial(n), samples, reports, sum(1 for _, at in sent if start <= at <= end))
    result.trial_s = round(time.monotonic() - began, 1)
    return result


def sample(contender: Case, clients: list[Clients]) -> dict[str, Any]:
    """CPU samples of everything the trial runs, and the machine's."""
    return {
        "broker": cpu.process_tree(contender.broker_pid),
        "publisher": cpu.process_tree(contender.publisher.process.pid),
        "clients": [cpu.process_tree(c.process.pid) for c in clients],
        "machine": cpu.machine(),
    }


def evaluate(
    result: Trial,
    samples: list[dict[str, Any]],
    reports: list[tuple[list[dict[str, Any]], list[float]]],
    ticks: int,
) -> Trial:
    """A trial's measures from its CPU samples, its clients' reports and the ticks sent."""
    before, after = samples
    wall = after["machine"].at - before["machine"].at if after["machine"] else 0.0
    counts = [s for subscribers, _ in reports for s in subscribers]
    latencies = np.array([v for _, samples_ms in reports for v in samples_ms])
    rows = sum(s["rows"] for s in counts)
    useful = sum(s["useful"] for s in counts)
    result.delivered_min = round(min(min(s["ticks"] / max(ticks, 1), 1.0) for s in counts), 3)
    result.lost = sum(s["lost"] for s in counts)
    if len(latencies):
        result.p50_ms = round(float(np.percentile(latencies, 50)), 1)
        result.p99_ms = round(float(np.percentile(latencies, 99)), 1)
    window = after["broker"].at - before["broker"].at
    result.useful_fraction = round(useful / rows, 3) if rows else 0.0
    result.useful_rows_per_s = round(useful / window)
    result.messages_per_s = round(sum(s["messages"] for s in counts) / window)
    if useful:
        result.bytes_per_useful_row = round(sum(s["bytes"] for s in counts) / useful, 1)
        broker_seconds = after["broker"].seconds - before["broker"].seconds
        result.broker_cpu_us_per_useful_row = round(broker_seconds / useful * 1e6, 3)
    result.broker_cores = round(after["broker"].cores_since(before["broker"]), 3)
    result.publisher_cores = round(after["publisher"].cores_since(before["publisher"]), 3)
    result.client_cores = [
        round(a.cores_since(b), 3) for a, b in zip(after["clients"], before["clients"], strict=True)
    ]
    if wall:
        result.machine_cores = round(after["machine"].cores_since(before["machine"]), 3)
    result.load_average = round(os.getloadavg()[0], 2)
    own = [*result.client_cores, result.publisher_cores]
    result.verdict = judge(result.delivered_min, result.p99_ms, own, result.lost)
    return result


async def search(contender: Case, args: Any, logs: Path) -> tuple[Search, list[Trial]]:
    """The most subscribers ``contender`` holds (``fanout.testing.spatial.Search``)."""
    found = Search(args.start, args.limit, args.bisections)
    trials = []
    while (n := found.next()) is not None:
        result = await trial(contender, n, args, logs)
        found.record(n, result.verdict)
        trials.append(result)
        print(f"spatial {contender.name} {json.dumps(asdict(result))}", file=sys.stderr, flush=True)
    return found, trials


async def one_run(args: Any, load: Path, logs: Path) -> dict[str, Any]:
    """Each contender's search, one after the other."""
    run: dict[str, Any] = {}
    for name in args.cases:
        async with case(name, args.entities, load, logs) as contender:
            found, trials = await search(contender, args, logs)
        top = next((t for t in trials if t.subscribers == found.best), None)
        run[f"{name}_max_subscribers"] = found.best
        run[f"{name}_bound"] = found.bound
        run[f"{name}_cpu_us_per_useful_row"] = top.broker_cpu_us_per_useful_row if top else None
        run[f"{name}_useful_fraction"] = trials[0].useful_fraction
        run[f"{name}_bytes_per_useful_row"] = trials[0].bytes_per_useful_row
        run[f"{name}_trials"] = [asdict(t) for t in trials]
    return run


SUMMARIZED = ("max_subscribers", "cpu_us_per_useful_row", "useful_fraction", "bytes_per_useful_row")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the runs and spreads (max - min), each run's bound and trials."""
    result: dict[str, Any] = {}
    for name in [n for n in CASES if f"{n}_bound" in runs[0]]:
        for measure in SUMMARIZED:
            values = [r[f"{name}_{measure}"] for r in runs if r[f"{name}_{measure}"] is not None]
            key = f"{name}_{measure}"
            median = float(np.median(values)) if values else None
            if measure == "max_subscribers" and median is not None:
                median = int(median)  # of an odd number of runs: one run's figure
            result[key] = round(median, 3) if median is not None else None
            result[f"{key}_spread"] = round(max(values) - min(values), 3) if values else None
        result[f"{name}_bounds"] = [r[f"{name}_bound"] for r in runs]
    result["spatial_trials"] = [
        {n: r[f"{n}_trials"] for n in CASES if f"{n}_trials" in r} for r in runs
    ]
    return result


async def spatial_runs(args: Any) -> dict[str, Any]:
    """``args.runs`` runs of the three contenders: the JSON keys of ``bench/mqtt.py --spatial``."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-spatial-") as temp:
        load = build_load(Path(temp))
        logs = Path(args.logs)
        logs.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before any trial starts)
        runs = [await one_run(args, load, logs) for _ in range(args.runs)]
    result: dict[str, Any] = {
        "spatial_runs": args.runs,
        "spatial_entities": args.entities,
        "spatial_window_s": args.window,
        "spatial_client_processes": args.processes,
        "spatial_elapsed_s": round(time.monotonic() - began),
        "spatial_note": NOTE,
    }
    return {**result, **summarize(runs)}
