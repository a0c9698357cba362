"""Where a tick's time goes through ``fanout relay --workers N`` (issue 39), and which
subscribers it is late for.

One trial of ``bench/relay.py``'s workload (its publisher, its picows subscribers moving box
views of their own at 10 Hz), with the relay run as the command. Per tick, from the relays' own
record (``GET /v1/admin/batches``, which the relay's port and the leader's both answer for the
whole relay: the leader's read, write and swap, the first and last worker's swap, the first and
last round pushing it on any process), each stage's time after the publisher's tick; per subscriber,
the median latency of what it received (from the publisher's send). ``late_subscribers`` counts
those whose median is past 50 ms: on a stream at their own rate they were the sign of the rate
bucket's lock (docs/benchmarks/relay.md, "A tick behind: the rate's lock"). ``--still`` holds
every view still; ``--rate`` asks another rate than the ticks' 10 a second; ``--entities`` sizes
the world (100,000 by default).

    .venv/bin/python bench/workerpath.py --subscribers 500 --workers 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import relayclients
from fanout.testing import cpu, world
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from relayclients import clients_main, open_window, start_clients

STAGES = (
    "read",
    "written",
    "swapped",
    "workers_swapped_first",
    "workers_swapped_last",
    "pushed_first",
    "pushed_last",
)
LATE_MS = 50.0


def subscribers_main(*args: Any) -> None:
    """A client process of ``relayclients``, with views held still or another rate if asked
    (``--still``, ``--rate``: set in the process that moves and subscribes)."""
    options = args[-1]
    if options["still"]:
        world.MOVE_EVERY = 1e9
        relayclients.MOVE_EVERY = 1e9  # type: ignore[attr-defined]  # imported there
    relayclients.PUSH_RATE = options["rate"]
    clients_main(*args[:-1])


def batches(url: str) -> list[dict[str, Any]]:
    """The relay at ``url``'s last batches of ``agents`` (``GET /v1/admin/batches``)."""
    address = url.replace("ws://", "http://").rstrip("/") + "/v1/admin/batches"
    with urllib.request.urlopen(address, timeout=10) as answer:
        return [b for b in json.load(answer)["batches"] if b["dataset"] == "agents"]


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": round(float(p50), 1), "p90": round(float(p90), 1), "p99": round(float(p99), 1)}


def stages(records: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """Each stage's ms after its tick, over the window's ticks that reached it (a stage not
    reached, or not in the record, is left out)."""
    kept = [r for r in records if start <= r["tick_time"] <= end]
    return {
        stage: percentiles([1e3 * (r[stage] - r["tick_time"]) for r in kept if r.get(stage)])
        for stage in STAGES
    }


def start_relay(publisher: str, workers: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``fanout relay --workers N`` on a free port; the process and its URL once ready."""
    command = [sys.executable, "-m", "fanout", "relay", "--publisher", publisher, "--port", "0"]
    command += ["--name", "bench", "--workers", str(workers), "--log-level", "info"]
    with log.open("wb") as stderr:
        relay = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
    assert relay.stdout is not None
    while True:
        line = relay.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"the relay ended ({relay.wait()}): see {log}")
        if line.startswith("fanout relay ready "):
            return relay, line.split()[-1]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One trial: start the publisher, the relay and the subscribers; measure; stop them."""
    context = mp.get_context("spawn")
    children: list[Any] = []
    log = Path(args.log)
    relay = None
    try:
        pub_conn, pub_child = context.Pipe()
        publisher = context.Process(
            target=world.publisher_main, args=(pub_child, args.entities, 1.0)
        )
        publisher.start()
        children.append(publisher)
        relay, url = start_relay(pub_conn.recv(), args.workers, log)
        found = re.search(rb"leader at (ws://[0-9.:]+)", log.read_bytes())
        started = time.time()
        everyone = world.routes(args.subscribers, 1, seed=args.subscribers)
        options = {"still": args.still, "rate": args.rate}
        conns = start_clients(
            context,
            url,
            everyone,
            started,
            processes=args.processes,
            children=children,
            target=subscribers_main,
            extra=(options,),
        )
        start, end = open_window(conns, args.warmup, args.measure)
        relay_cpu = cpu.process_tree(relay.pid)
        time.sleep(max(0.0, end - time.time()))
        relay_cores = cpu.process_tree(relay.pid).cores_since(relay_cpu)
        led = batches(found.group(1).decode() if found else url)  # the whole relay's record
        reports = [conn.recv() for conn in conns]
        pub_conn.send("report")
        sent = {seq: at for seq, at in pub_conn.recv()["sent"] if start <= at <= end}
        pub_conn.send("stop")
    finally:
        if relay is not None:
            relay.terminate()
            relay.wait(30)
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
    return {
        "subscribers": args.subscribers,
        "entities": args.entities,
        "workers": args.workers,
        "still": args.still,
        "rate": args.rate,
        **received(reports, sent),
        "relay_ms": stages(led, start, end),
        "relay_cores": round(relay_cores, 2),
        "clients_cores": round(sum(r["cpu"][1].cores_since(r["cpu"][0]) for r in reports), 2),
    }


def received(reports: list[dict[str, Any]], sent: dict[int, float]) -> dict[str, Any]:
    """Latency from the publisher's send of all that was received, and per subscriber."""
    latencies: list[float] = []
    medians: list[float] = []
    for report in reports:
        for frames in report["received"]:
            mine = [1e3 * (at - sent[seq]) for seq, at, _ in frames if seq in sent]
            latencies += mine
            if mine:
                medians.append(float(np.median(mine)))
    return {
        "latency_ms": percentiles(latencies),
        "late_subscribers": sum(m > LATE_MS for m in medians),
        "subscriber_median_ms": percentiles(medians),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--entities", type=int, default=100_000, help="the world's entities")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--still", action="store_true", help="views that never move")
    parser.add_argument("--rate", type=float, default=10.0, help="pushes a second asked")
    parser.add_argument("--processes", type=int, default=2, help="subscriber processes")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--measure", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=1, help="trials, one after the other")
    parser.add_argument("--log", default="/tmp/workerpath-relay.log")
    parser.add_argument("--output", type=Path, help="write the results there too")
    args = parser.parse_args()
    calibration = calibrate()
    trials = [run(args) for _ in range(args.runs)]
    results = {"trials": trials, "machine": describe(), "calibration": calibration}
    write_results(results, args.output)


if __name__ == "__main__":
    main()
