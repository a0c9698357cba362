"""One trial of ``bench/relay.py``: start a publisher, a relay and the client processes at N
subscribers, measure one window, and turn what they recorded into the trial's figures."""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fanout.relay.config import RelayConfig, Upstream
from fanout.testing import cpu
from fanout.testing.relays import RelayProcess
from fanout.testing.world import (
    publisher_main,
    routes,
)
from relayclients import open_window, start_clients
from relayinstrument import CommandRelay, instrument, loop_given, spy_on

ENTITIES = 100_000
TARGET_DELIVERED = 0.95
TARGET_P99_MS = 100.0


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
        client_conns = start_clients(
            context, url, everyone, started, processes=args.processes, children=children
        )
        start, end = open_window(client_conns, args.warmup, args.measure)
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


def summary(trial: Trial) -> dict[str, Any]:
    """A trial without its raw counters, rounded for reading."""
    out = {k: v for k, v in asdict(trial).items() if k != "relay_stats"}
    return {k: _rounded(v) for k, v in out.items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 3) if isinstance(value, float) else value
