"""Benchmark one relay process: 100,000 moving entities, N subscribers with moving box views.

Run ``.venv/bin/python bench/relay.py`` (``--quick`` for a short run); it prints one JSON object
and writes ``bench/results/relay.json``.

Processes, all on this machine and sharing its cores:

* **publisher**: a scripted publisher speaking the real protocol (``fanout.testing.publisher``:
  ``Hello``/``Welcome``, ``Catalog``, ``Acquire``/``Release``, one ``Batch`` per tick; no
  Spark): 100,000 entities in a 4,000 x 4,000 world, every one moving every tick, 10 ticks/s
  (the headline; ``--moving 0.001``: a mostly idle world where one in a thousand moves, and
  most views see no row change in a tick: ``relay.kinds.quiet``).
  Each batch carries the rows inside the relay's primitives, deletes for rows that left them and
  snapshots for primitives acquired since the last tick, like the real publisher's.
  ``tick_time`` is the batch's send time.
* **relay**: the real relay (``fanout.relay.shell.server.RelayServer``, default configuration) in a
  process of its own. The only instrumentation: the time each tick's state is swapped in
  (``RelayCore.end_epoch``) is recorded, and CPU time and ``RelayCore.stats()`` are sampled at
  the start and end of the measurement window.
* **clients**: N subscriber connections spread over ``--processes`` processes. Each connection
  speaks the real protocol over a real WebSocket (``Hello``, ``Subscribe`` at 10 pushes/s) and
  moves its box view (125 x 125, about 100 entities) along its own path at 20 units/s, sending a
  new ``Subscribe`` once a second. To leave the cores to the relay, clients speak WebSocket
  through picows (frames parsed in compiled code, handed to a callback: no task or queue per
  message) and decode only each frame's header (type, sub, seq) instead of applying rows as the
  client library does.

Per trial (one N): connect and subscribe everyone, warm up, then measure for ``--measure``
seconds:

* ``delivered``: per subscriber, the fraction of the ticks published in the window for which it
  received a push (or no-update) cut from that tick's state;
* ``p99_ms``: 99th percentile of tick-swap-to-receipt: from the relay swapping in the state of a
  tick to a subscriber receiving the push cut from it (both clocks are this machine's);
  ``p99_tick_ms`` is from the publisher sending the tick's batch (adds transfer and ingest);
  ``p99_swap_ms`` is from the publisher sending a batch to the relay swapping it in (transfer,
  reading, writing the inert buffer, waiting for the next round);
* ``bytes_per_update``: mean size of the frames (pushes and no-updates) received;
* CPU, in cores, of the relay (its event loop and its writer thread), the publisher, the
  clients, and ``other_cpu``: everything else the machine ran meanwhile (other tenants of a
  shared machine), next to the one-minute ``load_average``;
* ``relay_cpu_us_per_push``: the relay's CPU time (everything: ingest, housekeeping, socket
  writes) per push; ``pump_cpu_us_per_push``: the event loop thread's CPU time in rounds of
  pushes (scheduling, cutting, transforming, encoding, queueing) per push;
  ``pushes_per_round``: how many pushes a round of the pump served (what its own cost a round,
  waiting for the next wake-up, is shared by). CPU time, unlike latency, does not grow when other
  processes take the cores (contention for caches and the memory bus still shows in it).

A trial passes when every subscriber got >= 95% of the ticks and p99_ms <= 100, and none was
disconnected or sent an ``Error`` (``disconnected`` counts them). ``max_subscribers`` is the
largest N that passes: N doubles from ``--start`` until a trial fails, then is bisected.
A last pair of trials at the same N compares distinct views with groups of ``--group``
subscribers sharing each view (spectators of one camera), to measure shared encodings.

``--workers W`` runs the relay as ``fanout relay --workers W`` (a leader and W workers,
``relay.shell.workers``), measured from outside (``CommandRelay``): CPU of the leader and its
workers, counters from each worker's ``/metrics``, latency from the publisher's send. A full run
then searches again with W workers for ``max_subscribers_all_workers``; ``--only N --alternate
K`` runs K pairs of trials at N, 1 worker then W, and writes ``bench/results/relay-workers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

import picowsclient
from fanout.metrics import scrape
from fanout.relay.config import Process, RelayConfig, Upstream
from fanout.relay.core.relaycore import Send
from fanout.relay.shell.server import RelayServer
from fanout.testing import cpu, frames
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.relays import RelayProcess
from fanout.testing.world import (
    MOVE_EVERY,
    TICK_RATE,
    VIEW_SIDE,
    Route,
    publisher_main,
    routes,
)
from fanout.wire import codec
from fanout.wire.messages import Subscribe

RESULTS = Path(__file__).parent / "results" / "relay.json"
#: ``--only N --workers W --alternate K``'s results.
WORKERS_RESULTS = RESULTS.with_name("relay-workers.json")

ENTITIES = 100_000
PUSH_RATE = 10.0
TARGET_DELIVERED = 0.95
TARGET_P99_MS = 100.0
DRAIN = 1.5  # seconds after the window for its last pushes to arrive
CONNECT_CONCURRENCY = 32


# -- the relay --------------------------------------------------------------------------------


def instrument(server: RelayServer) -> Callable[[], dict[str, Any]]:
    """The relay process's only instrumentation (``fanout.testing.relays.Instrument``): when each
    tick's state is swapped in, the CPU time of the event loop's rounds of pushes, and how many
    rounds there were."""
    core = server.core
    swaps: list[tuple[int, float]] = []
    end_epoch = core.end_epoch

    def recorded_end_epoch() -> list[Send]:
        before = {name: state.buffer.generation for name, state in core.datasets.items()}
        sends = end_epoch()
        now = time.time()
        for name, state in core.datasets.items():
            stamp = state.buffer.stamp
            if stamp is not None and state.buffer.generation != before.get(name):
                swaps.append((stamp.seq, now))
        return sends

    core.end_epoch = recorded_end_epoch  # type: ignore[method-assign]
    # The pump times its rounds itself (``Pump.push_cpu``, two CPU clock reads a round, each a
    # system call of several µs here): the benchmark reads that and only counts the rounds.
    rounds = [0]
    pump_round = server.pump.round

    def counted_pump_round(now: float) -> None:
        pump_round(now)
        rounds[0] += 1

    server.pump.round = counted_pump_round  # type: ignore[method-assign]
    pump = server.pump
    return lambda: {"swaps": list(swaps), "pump_cpu": pump.push_cpu, "pump_rounds": rounds[0]}


class CommandRelay:
    """The relay as ``fanout relay --workers N`` runs it (``--workers``): a leader and N workers
    (or, for N = 1, the one process), sampled from outside, as ``RelayProcess`` is from inside.

    CPU is the process tree's (the leader and its workers, ``cpu.process_tree``), each worker's
    besides; counters are each worker's ``/metrics``, read on the relay's port until every
    worker has answered (a new connection each time: the kernel picks the worker), summed.
    Nothing in it records when a tick is swapped in: trials of this relay measure latency from
    the publisher's send (``p99_tick_ms``).
    """

    def __init__(self, publisher: str, workers: int, log: Path) -> None:
        command = [sys.executable, "-m", "fanout", "relay", "--publisher", publisher]
        command += ["--port", "0", "--name", "bench", "--workers", str(workers)]
        self.workers = workers
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [*command, "--log-level", "warning"], stdout=subprocess.PIPE, stderr=stderr
            )
        self.url = ""

    def ready(self, timeout: float = 120.0) -> str:
        """Wait for its ready line; return its URL."""
        assert self.process.stdout is not None
        deadline = time.time() + timeout
        while not self.url:
            line = self.process.stdout.readline().decode()
            if not line or time.time() > deadline:
                raise RuntimeError(f"the relay did not become ready ({self.process.poll()})")
            if line.startswith("fanout relay ready "):
                self.url = line.split()[-1]
        return self.url

    def sample(self) -> SimpleNamespace:
        """CPU time (all, and of each worker), counters summed and by worker, now."""
        by_worker: dict[str, dict[str, float]] = {}
        for _ in range(200):
            values = scrape(self.url)
            which = next((k for k in values if k.startswith("fanout_relay_worker{")), "1")
            by_worker[which] = values
            if len(by_worker) >= self.workers:
                break
        else:
            raise RuntimeError(f"{self.workers} workers, {len(by_worker)} answered /metrics")
        stats: dict[str, float] = {}
        for values in by_worker.values():
            for name, value in values.items():
                if name.startswith("fanout_relay_") and "{" not in name:
                    key = name.removeprefix("fanout_relay_").removesuffix("_total")
                    stats[key] = stats.get(key, 0.0) + value
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = [int(pid) for pid in children.read_text().split()] if self.workers > 1 else []
        report = {
            "pump_cpu": stats.get("push_cpu_seconds", 0.0),
            "swaps": [],
            "workers_cpu": [cpu.process_tree(pid) for pid in pids],
            "workers": dict(sorted(by_worker.items())),
        }
        return SimpleNamespace(cpu=cpu.process_tree(self.process.pid), stats=stats, report=report)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the subscribers --------------------------------------------------------------------------


class Subscriber(picowsclient.Connection):
    """One subscriber connection: subscribes, moves its view, records what arrives.

    It speaks WebSocket through picows, whose frame parsing is compiled: each frame reaches
    ``on_ws_frame`` in the read's callback, with no task, queue or future per message, so that
    the clients leave the machine's cores to the relay (with websockets' sans-I/O protocol,
    parsed in Python, they took 0.43 cores at 1,750 subscribers, with picows 0.31). It decodes
    each message's header (type, sub, seq) and records its size, as the relay sent it.
    """

    def __init__(self, url: str, route: Route, started: float) -> None:
        super().__init__(url)
        self.route, self.started = route, started
        self.received: list[tuple[int, float, int]] = []  # (seq, receipt time, bytes)

    async def open(self) -> None:
        await super().open()
        self._subscribe(self.route.step(time.time() - self.started))

    def on_message(self, message: bytes | memoryview, now: float) -> None:
        head = frames.head(message)
        if head.type in ("push", "no_update"):
            self.received.append((head.seq, now, len(message)))
        elif head.type == "error":
            self.refused(message)

    def _subscribe(self, step: int) -> None:
        request = Subscribe(1, "agents", self.route.box(step), rate=PUSH_RATE)
        self.send(codec.encode(request))

    async def move(self, until: float) -> None:
        step = self.route.step(time.time() - self.started)
        while time.time() < until:
            step += 1
            due = self.started + self.route.offset + step * MOVE_EVERY
            await asyncio.sleep(max(0.0, due - time.time()))
            self._subscribe(step)


def clients_main(conn: Connection, url: str, mine: list[Route], started: float) -> None:
    """A client process: open its connections, then record until told the window is over."""

    async def main() -> None:
        subscribers = [Subscriber(url, route, started) for route in mine]
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def open_one(subscriber: Subscriber) -> None:
            async with gate:
                await subscriber.open()

        await asyncio.gather(*(open_one(s) for s in subscribers))
        conn.send("ready")
        loop = asyncio.get_running_loop()
        start, end = await loop.run_in_executor(None, conn.recv)
        movers = [asyncio.create_task(s.move(end)) for s in subscribers]
        samples = []
        for moment in (start, end):
            await asyncio.sleep(max(0.0, moment - time.time()))
            samples.append(cpu.this_process())
        await asyncio.sleep(DRAIN)
        received = [
            [r for r in s.received if start - 1 <= r[1] <= end + DRAIN] for s in subscribers
        ]
        closed = [s.closed for s in subscribers if s.closed]  # closed, or sent an error
        conn.send({"cpu": samples, "received": received, "closed": closed})
        for task in movers:
            task.cancel()
        for subscriber in subscribers:
            subscriber.close()

    asyncio.run(main())


# -- the coordinator --------------------------------------------------------------------------


@dataclass
class Trial:
    """One N: what was asked and what was measured."""

    subscribers: int
    group: int = 1
    workers: int = 1
    passed: bool = False
    delivered_min: float = 0.0
    delivered_mean: float = 0.0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    p99_tick_ms: float = math.nan
    p99_swap_ms: float = math.nan
    bytes_per_update: float = math.nan
    ticks_in_window: int = 0
    tick_rate: float = 0.0
    pushes_per_s: float = 0.0
    relay_cpu: float = 0.0
    relay_cpu_us_per_push: float = math.nan
    pump_cpu_us_per_push: float = math.nan
    pushes_per_round: float = math.nan
    clients_cpu: float = 0.0
    publisher_cpu: float = 0.0
    bodies_shared_fraction: float = 0.0
    relay_rows: int = 0
    disconnected: int = 0
    load_average: float = 0.0
    other_cpu: float = 0.0
    workers_cpu: list[float] = field(default_factory=list)
    leader_cpu: float = math.nan
    write_ms_per_batch: float = math.nan
    worker_connections: list[int] = field(default_factory=list)
    worker_rows: list[int] = field(default_factory=list)
    relay_stats: dict[str, int] = field(default_factory=dict)


def run_trial(
    subscribers: int, args: argparse.Namespace, group: int = 1, workers: int | None = None
) -> Trial:
    """Start a publisher, a relay and the clients; measure one window; stop them all.

    ``workers``: run the relay as ``fanout relay --workers`` (``CommandRelay``); None: the
    relay instrumented in a process of its own (``RelayProcess``).
    """
    context = mp.get_context("spawn")
    children: list[Any] = []
    relay: RelayProcess | CommandRelay | None = None
    log = Path(args.logs) / f"relay-{subscribers}-{group}-{workers}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        pub_conn, pub_child = context.Pipe()
        publisher = context.Process(
            target=publisher_main, args=(pub_child, args.entities, args.moving)
        )
        publisher.start()
        pub_child.close()
        children.append(publisher)
        pub_url = pub_conn.recv()
        if workers is None:
            relay = RelayProcess(
                RelayConfig(Upstream(pub_url), name="bench", **loop_given(args.loop)),
                log=log,
                instrument=instrument,
                profile=log.with_suffix(".prof") if args.profile else None,
            )
        else:
            relay = CommandRelay(pub_url, workers, log)
        url = relay.ready()
        started = time.time()
        everyone = routes(subscribers, group, seed=subscribers)
        client_conns = []
        for index in range(args.processes):
            mine = everyone[index :: args.processes]
            conn, child = context.Pipe()
            process = context.Process(target=clients_main, args=(child, url, mine, started))
            process.start()
            child.close()  # a client process that fails ends its pipe (EOFError), not waited on
            children.append(process)
            client_conns.append(conn)
        for conn in client_conns:
            assert conn.recv() == "ready"
        start = time.time() + args.warmup
        end = start + args.measure
        for conn in client_conns:
            conn.send((start, end))
        samples = []
        spy = None
        for moment in (start, end):
            time.sleep(max(0.0, moment - time.time()))
            pub_conn.send("cpu")
            samples.append((relay.sample(), pub_conn.recv(), cpu.machine()))
            if args.spy and spy is None:
                spy = spy_on(relay.process.pid, args.measure, Path(args.spy))
        if spy is not None:
            spy.wait(timeout=args.measure + 30)
        reports = [conn.recv() for conn in client_conns]
        swaps = relay.sample().report["swaps"]  # after the clients' drain: every swap of the window
        pub_conn.send("report")
        sent = pub_conn.recv()["sent"]
        pub_conn.send("stop")
        records = Records(start, end, samples, reports, swaps, sent)
        return evaluate(Trial(subscribers, group, workers=workers or 1), records)
    finally:
        if relay is not None:
            relay.stop()
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()


def spy_on(pid: int | None, seconds: float, output: Path) -> subprocess.Popen[bytes]:
    """Sample the relay process's stacks with py-spy for ``seconds`` (the measurement window),
    written to ``output`` as collapsed stacks (``.txt``, one line a stack with its count) or as a
    flame graph (``.svg``). Non-blocking: py-spy reads the process's memory without stopping it,
    so the relay's own CPU time is what it is without the profiler."""
    assert pid is not None
    kind = "flamegraph" if output.suffix == ".svg" else "raw"
    command = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid)]
    command += ["--duration", str(math.ceil(seconds)), "--rate", "250", "--nonblocking"]
    command += ["--format", kind, "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)


def loop_given(loop: str) -> dict[str, Process]:
    """The relay's ``process`` section for ``--loop``; none for the default, so that this script
    also runs a checkout from before ``Process.loop`` (``bench/checkouts.py``: one harness for
    both sides of an A/B)."""
    return {} if loop == "asyncio" else {"process": Process(loop=loop)}  # type: ignore[arg-type]


@dataclass
class Records:
    """What the processes of one trial recorded.

    Attributes:
        start, end: the measurement window (wall clock).
        samples: (relay, publisher, machine) samples at the start and at the end.
        reports: each client process's CPU samples, received frames and closed connections.
        swaps: (seq, time) the relay swapped in the state of each tick.
        sent: (seq, time) the publisher sent each tick's batch.
    """

    start: float
    end: float
    samples: list[Any]
    reports: list[dict[str, Any]]
    swaps: list[tuple[int, float]]
    sent: list[tuple[int, float]]


def evaluate(trial: Trial, records: Records) -> Trial:
    """Turn the raw records of one trial into its measures."""
    start, end, samples, reports = records.start, records.end, records.samples, records.reports
    swaps, sent = records.swaps, records.sent
    trial.load_average = os.getloadavg()[0]  # the last minute: this trial and anything else
    window = {seq: at for seq, at in sent if start <= at <= end}
    swapped: dict[int, float] = {}
    for seq, at in swaps:
        swapped.setdefault(seq, at)
    trial.ticks_in_window = len(window)
    trial.tick_rate = len(window) / (end - start)
    fractions, latencies, tick_latencies, sizes = [], [], [], []
    for report in reports:
        trial.disconnected += len(report["closed"])
        for received in report["received"]:
            got = {seq for seq, _, _ in received if seq in window}
            fractions.append(len(got) / max(len(window), 1))
            for seq, at, size in received:
                if seq in window:
                    sizes.append(size)
                    tick_latencies.append(at - window[seq])
                    if seq in swapped:
                        latencies.append(at - swapped[seq])
    if not swaps:  # a relay run as the command (``CommandRelay``): from the publisher's send
        latencies = tick_latencies
    trial.delivered_min = min(fractions, default=0.0)
    trial.delivered_mean = float(np.mean(fractions)) if fractions else 0.0
    if latencies:
        trial.p50_ms = float(np.percentile(latencies, 50) * 1e3)
        trial.p99_ms = float(np.percentile(latencies, 99) * 1e3)
        trial.p99_tick_ms = float(np.percentile(tick_latencies, 99) * 1e3)
        trial.bytes_per_update = float(np.mean(sizes))
    ingest = [swapped[seq] - at for seq, at in window.items() if seq in swapped]
    if ingest:
        trial.p99_swap_ms = float(np.percentile(ingest, 99) * 1e3)
    (relay_0, pub_0, busy_0), (relay_1, pub_1, busy_1) = samples
    wall = relay_1.cpu.at - relay_0.cpu.at
    trial.relay_cpu = relay_1.cpu.cores_since(relay_0.cpu)
    trial.publisher_cpu = pub_1.cores_since(pub_0)
    trial.clients_cpu = sum(r["cpu"][1].cores_since(r["cpu"][0]) for r in reports)
    ours = trial.relay_cpu + trial.publisher_cpu + trial.clients_cpu
    if busy_0 is not None and busy_1 is not None:  # other tenants of the machine
        trial.other_cpu = max(0.0, busy_1.cores_since(busy_0) - ours)
    before, after = relay_0.stats, relay_1.stats
    delta = {key: after[key] - before.get(key, 0) for key in after}
    pushes = delta["pushes"] + delta["no_updates"]
    trial.pushes_per_s = pushes / wall
    relay_seconds = relay_1.cpu.seconds - relay_0.cpu.seconds
    trial.relay_cpu_us_per_push = relay_seconds / max(pushes, 1) * 1e6
    pump_seconds = relay_1.report["pump_cpu"] - relay_0.report["pump_cpu"]
    trial.pump_cpu_us_per_push = pump_seconds / max(pushes, 1) * 1e6
    if "pump_rounds" in relay_1.report:
        rounds = relay_1.report["pump_rounds"] - relay_0.report["pump_rounds"]
        trial.pushes_per_round = pushes / max(rounds, 1)
    if "workers_cpu" in relay_1.report:
        by_workers(trial, relay_0, relay_1, delta)
    bodies = delta["bodies_cut"] + delta["bodies_shared"]
    trial.bodies_shared_fraction = delta["bodies_shared"] / max(bodies, 1)
    trial.relay_rows = after["rows"]
    trial.relay_stats = delta
    trial.passed = (
        trial.delivered_min >= TARGET_DELIVERED
        and trial.p99_ms <= TARGET_P99_MS
        and trial.disconnected == 0
    )
    return trial


def by_workers(trial: Trial, relay_0: Any, relay_1: Any, delta: dict[str, float]) -> None:
    """A trial's figures of ``CommandRelay``: each worker's CPU, connections and rows, the
    leader's CPU, the writer's time a batch."""
    worker_pairs = zip(relay_0.report["workers_cpu"], relay_1.report["workers_cpu"], strict=True)
    trial.workers_cpu = [after.cores_since(before) for before, after in worker_pairs]
    if trial.workers_cpu:
        trial.leader_cpu = trial.relay_cpu - sum(trial.workers_cpu)
    # the writer thread's time a batch, over the workers' batches (or the one process's)
    batches = delta.get("batch_write_seconds_count", 0)
    trial.write_ms_per_batch = delta.get("batch_write_seconds_sum", 0) / max(batches, 1) * 1e3
    seen = relay_1.report["workers"].values()
    trial.worker_connections = [int(v.get("fanout_relay_connections", 0)) for v in seen]
    trial.worker_rows = [int(v.get("fanout_relay_rows", 0)) for v in seen]


def search(args: argparse.Namespace, workers: int | None = None) -> tuple[int, list[Trial]]:
    """Double N until a trial fails, then bisect between the last pass and the first fail
    (``workers``: as ``run_trial``'s)."""
    trials: list[Trial] = []

    def trial(n: int) -> bool:
        result = run_trial(n, args, workers=workers)
        trials.append(result)
        print(json.dumps(summary(result)), file=sys.stderr, flush=True)
        return result.passed

    best, worst = 0, None
    n = args.start
    while n <= args.max:
        if not trial(n):
            worst = n
            break
        best = n
        n *= 2
    while worst is not None and worst - best > max(args.resolution * best, 1):
        middle = (best + worst) // 2
        if trial(middle):
            best = middle
        else:
            worst = middle
    return best, trials


def summary(trial: Trial) -> dict[str, Any]:
    """A trial without its raw counters, rounded for reading."""
    out = {k: v for k, v in asdict(trial).items() if k != "relay_stats"}
    return {k: _rounded(v) for k, v in out.items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 3) if isinstance(value, float) else value


def alternate(args: argparse.Namespace) -> dict[str, Any]:
    """``--only N --workers W --alternate K``: K pairs of trials at N, 1 worker then W, both run
    as the command (``CommandRelay``); their figures side by side and the medians' ratios."""
    arms: dict[int, list[Trial]] = {1: [], args.workers: []}
    for _ in range(args.alternate):
        for workers, trials in arms.items():
            trial = run_trial(args.only, args, group=args.group, workers=workers)
            trials.append(trial)
            print(json.dumps(summary(trial)), file=sys.stderr, flush=True)

    def median(workers: int, name: str) -> float:
        return float(np.median([getattr(t, name) for t in arms[workers]]))

    figures = ("relay_cpu", "relay_cpu_us_per_push", "p99_ms", "delivered_min", "pushes_per_s")
    medians = {w: {name: round(median(w, name), 3) for name in figures} for w in arms}
    return {
        "subscribers": args.only,
        "group": args.group,
        "workers": args.workers,
        "entities": args.entities,
        "moving": args.moving,
        "note": "each trial runs the relay as `fanout relay --workers W` (W = 1 or --workers);"
        " p99_ms is from the publisher's send; relay_cpu is the leader's and its workers'",
        "medians": medians,
        "passed": {w: [t.passed for t in arms[w]] for w in arms},
        "cpu_per_push_ratio": round(
            medians[args.workers]["relay_cpu_us_per_push"] / medians[1]["relay_cpu_us_per_push"],
            3,
        ),
        "trials": {w: [summary(t) for t in arms[w]] for w in arms},
        "machine": describe(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=ENTITIES)
    parser.add_argument(
        "--moving",
        type=float,
        default=1.0,
        help="fraction of the entities that move (default 1: every one, every tick; 0.001: a"
        " mostly idle world, where most views see no row change in a tick)",
    )
    parser.add_argument("--start", type=int, default=125, help="first N (default: 125)")
    parser.add_argument("--max", type=int, default=4096, help="largest N tried (default: 4096)")
    parser.add_argument("--resolution", type=float, default=0.125, help="bisect to this fraction")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--measure", type=float, default=10.0)
    parser.add_argument("--group", type=int, default=8, help="subscribers per shared view")
    parser.add_argument("--logs", default="/tmp/fanout-bench-relay", help="relay logs go here")
    parser.add_argument("--quick", action="store_true", help="short windows, coarse search")
    parser.add_argument(
        "--profile", action="store_true", help="profile the relay (cProfile files next to logs)"
    )
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the relay's event loop"
    )
    parser.add_argument(
        "--spy", help="py-spy the relay over the window into this file (.txt collapsed, .svg)"
    )
    parser.add_argument("--only", type=int, help="run one trial with this N and print it")
    parser.add_argument(
        "--workers",
        type=int,
        help="run the relay as `fanout relay --workers N` (leader and workers, measured from"
        " outside, latency from the publisher's send); a full run adds"
        " max_subscribers_all_workers, searched with N workers (default: the relay"
        " instrumented in one process)",
    )
    parser.add_argument(
        "--alternate",
        type=int,
        help="with --only and --workers: this many pairs of trials, 1 worker then --workers",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=WORKERS_RESULTS,
        help=f"where --alternate writes its results (default: {WORKERS_RESULTS.name})",
    )
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.measure, args.resolution = 2.0, 4.0, 0.5
    if args.only and args.alternate:
        calibration = calibrate()
        write_results({**alternate(args), "calibration": calibration}, args.output)
        return
    if args.only:
        trial = run_trial(args.only, args, group=args.group, workers=args.workers)
        print(json.dumps(summary(trial), indent=2))
        return
    calibration = calibrate()
    best, trials = search(args)
    all_workers: int | None = None
    if args.workers is not None and args.workers > 1:
        all_workers, worker_trials = search(args, workers=args.workers)
        trials += worker_trials
    compare_at = max(best, args.start)
    distinct = run_trial(compare_at, args, group=1)
    shared = run_trial(compare_at, args, group=args.group)
    top = next((t for t in trials if (t.subscribers, t.workers, t.passed) == (best, 1, True)), None)
    results: dict[str, Any] = {
        "max_subscribers": best,
        # with --workers N > 1 (latency from the publisher's send, CPU of leader and workers)
        "max_subscribers_all_workers": all_workers,
        "workers": args.workers,
        "p99_ms": round(top.p99_ms, 1) if top else None,
        "bytes_per_update": round(top.bytes_per_update, 1) if top else None,
        "target_max_subscribers": 2000,
        "entities": args.entities,
        "moving": args.moving,
        "tick_rate": TICK_RATE,
        "push_rate": PUSH_RATE,
        "view_side": VIEW_SIDE,
        "client_processes": args.processes,
        "warmup_s": args.warmup,
        "measure_s": args.measure,
        "criteria": {"delivered_min": TARGET_DELIVERED, "p99_ms_max": TARGET_P99_MS},
        "trials": [summary(t) for t in trials],
        "sharing": {
            "subscribers": compare_at,
            "group": args.group,
            "distinct_views": summary(distinct),
            "shared_views": summary(shared),
            "relay_cpu_us_per_push_distinct": round(distinct.relay_cpu_us_per_push, 1),
            "relay_cpu_us_per_push_shared": round(shared.relay_cpu_us_per_push, 1),
            "pump_cpu_us_per_push_distinct": round(distinct.pump_cpu_us_per_push, 1),
            "pump_cpu_us_per_push_shared": round(shared.pump_cpu_us_per_push, 1),
        },
        "machine": describe(),
        "calibration": calibration,
    }
    write_results(results, RESULTS)


if __name__ == "__main__":
    main()
