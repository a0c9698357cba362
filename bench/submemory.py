"""Memory per subscriber: one relay against one Mosquitto, idle, active and stopped subscribers.

Run ``.venv/bin/python bench/submemory.py``; it prints one JSON object last and writes
``bench/results/submemory.json`` (``--quick``: 100 and 500 subscribers, short phases, not
written; ``--breakdown N``: where a traced relay's heap grows for N idle subscribers). Each
server (``fanout relay`` on bench/relay.py's scripted publisher; Mosquitto) is started afresh
for each mode (idle, active, stopped) and measured at 0, then ``--counts`` subscribers: its
process tree's rss, pss and uss over ``--window`` seconds, per subscriber over the baseline.
docs/benchmarks/submemory.md says how in full and what it found; the parts:
``submemoryclients``, ``submemoryservers``, ``submemorysteps``, ``submemorybreakdown``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from submemorybreakdown import breakdown
from submemoryclients import Clients, raise_open_files
from submemoryservers import mosquitto, mqtt_publishers, relay_server, relay_slow_closed
from submemorysteps import steps, stopped

RESULTS = Path(__file__).parent / "results" / "submemory.json"
ENTITIES = 100_000
#: asyncio's transport buffers this much beyond the relay's queue before it pauses the writer.
TRANSPORT_BYTES = 64 * 1024
RELAY_QUEUE_LIMIT, RELAY_STALL_TIMEOUT = 64, 10.0  # the relay's defaults (RelayConfig.limits)
MOSQUITTO_MAX_QUEUED_MESSAGES = 1000  # Mosquitto's default


async def run_relay(mode: str, args: argparse.Namespace, workdir: Path) -> Any:
    total = args.stopped if mode == "stopped" else max(args.counts)
    async with relay_server(workdir / mode, args.entities) as (pid, url):
        clients = Clients("relay", url, mode, total, args.processes)
        try:
            if mode == "stopped":
                seconds = min(args.stop_seconds, 3 * RELAY_STALL_TIMEOUT)
                found = await asyncio.to_thread(stopped, pid, clients, args, None, seconds)
                found["slow_consumers_closed"] = relay_slow_closed(url)
                return found
            return await asyncio.to_thread(steps, pid, clients, args.counts, args)
        finally:
            await asyncio.to_thread(clients.stop)


def run_mosquitto(mode: str, args: argparse.Namespace, workdir: Path) -> Any:
    total = args.stopped if mode == "stopped" else max(args.counts)
    (workdir / mode).mkdir(parents=True, exist_ok=True)
    with (
        mosquitto(workdir / mode) as (pid, port),
        mqtt_publishers(port, args.message_bytes, args.publishers) as publishers,
    ):

        def feed(count: int) -> None:
            if mode != "idle":
                for each in publishers:
                    each.send(("topics", count))
                for each in publishers:
                    each.recv()

        clients = Clients("mosquitto", port, mode, total, args.processes)
        try:
            if mode == "stopped":
                return stopped(pid, clients, args, feed, args.stop_seconds)
            found = steps(pid, clients, args.counts, args, feed)
            for each in publishers:
                each.send(("sample", None))
            return {"steps": found, "publishers": [each.recv() for each in publishers]}
        finally:
            clients.stop()


def per_subscriber(found: dict[str, Any], server: str, mode: str, count: int) -> float | None:
    run = found[server][mode]
    for each in run["steps"] if isinstance(run, dict) else run:
        if each.subscribers == count:
            return float(each.per_subscriber_bytes["rss"])
    return None


def headline(found: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Per-subscriber bytes of each server and mode at each count (the largest count's key
    plain, the others' ending ``_at_<count>``), and the stopped readers' growth and bound."""
    results: dict[str, Any] = {}
    for server in args.servers:
        for mode in ("idle", "active"):
            if mode not in args.modes:
                continue
            for count in args.counts:
                key = f"{server}_rss_per_subscriber_{mode}_bytes"
                results[key if count == max(args.counts) else f"{key}_at_{count}"] = per_subscriber(
                    found, server, mode, count
                )
    if "stopped" in args.modes:
        for server in args.servers:
            run = found[server]["stopped"]
            results[f"{server}_stopped_growth_per_subscriber_bytes"] = run[
                "growth_per_subscriber_bytes"
            ]
            frame = run["bytes_per_frame"]
            if server == "relay":
                bound = RELAY_QUEUE_LIMIT * frame + TRANSPORT_BYTES
            else:
                bound = MOSQUITTO_MAX_QUEUED_MESSAGES * (frame + len("active/9999") + 4)
            results[f"{server}_stopped_bound_per_subscriber_bytes"] = round(bound)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--stopped", type=int, default=200, help="subscribers that stop reading")
    parser.add_argument(
        "--stop-seconds",
        type=float,
        default=240.0,
        help="seconds Mosquitto's stopped readers are watched (the relay's: at most 30, three"
        " times its stall timeout, after which it has closed them)",
    )
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before a window")
    parser.add_argument("--window", type=float, default=10.0, help="seconds sampled")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--entities", type=int, default=ENTITIES)
    parser.add_argument("--message-bytes", type=int, default=4400, help="Mosquitto's message")
    parser.add_argument("--publishers", type=int, default=2, help="Mosquitto's publishers")
    parser.add_argument("--servers", nargs="+", default=["relay", "mosquitto"])
    parser.add_argument("--modes", nargs="+", default=["idle", "active", "stopped"])
    parser.add_argument("--quick", action="store_true", help="100 and 500 subscribers, short")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--breakdown",
        type=int,
        help="instead: this many idle subscribers on a traced relay in this process; where its"
        " heap grew (written to bench/results/submemory-breakdown.json)",
    )
    parser.add_argument("--frames", type=int, default=1, help="--breakdown's traceback depth")
    parser.add_argument("--breakdown-mode", choices=("idle", "active"), default="idle")
    parser.add_argument("--top", type=int, default=25, help="--breakdown's lines and types")
    args = parser.parse_args()
    if args.breakdown:
        traced = asyncio.run(breakdown(args))
        traced |= {"machine": describe(), "calibration": calibrate()}
        name = "submemory-breakdown.json"
        if args.breakdown_mode != "idle":
            name = f"submemory-breakdown-{args.breakdown_mode}.json"
        write_results(traced, args.out.with_name(name))
        return
    if args.quick:
        args.counts, args.stopped, args.stop_seconds = [100, 500], 50, 20.0
        args.settle, args.window = 3.0, 3.0
    open_files = raise_open_files()
    machine, calibration = describe(), calibrate()
    found: dict[str, dict[str, Any]] = {"relay": {}, "mosquitto": {}}
    with tempfile.TemporaryDirectory(prefix="fanout-bench-submemory-") as workdir:
        for mode in args.modes:
            for server in args.servers:
                print(f"{server} {mode}", file=sys.stderr, flush=True)
                if server == "relay":
                    found[server][mode] = asyncio.run(run_relay(mode, args, Path(workdir)))
                else:
                    found[server][mode] = run_mosquitto(mode, args, Path(workdir))
    results = headline(found, args)
    results["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    results["open_files_limit"] = open_files
    results["setup"] = {k: v for k, v in vars(args).items() if k not in ("out", "quick")}
    results["runs"] = {
        server: {
            mode: (
                [asdict(s) for s in run]
                if isinstance(run, list)
                else {k: [asdict(s) for s in v] if k == "steps" else v for k, v in run.items()}
            )
            for mode, run in modes.items()
        }
        for server, modes in found.items()
    }
    results["machine"], results["calibration"] = machine, calibration
    write_results(results, None if args.quick else args.out)
    summary = {k: v for k, v in results.items() if not isinstance(v, list | dict)}
    print(json.dumps(summary))  # the last line: the figures without the runs


if __name__ == "__main__":
    main()
