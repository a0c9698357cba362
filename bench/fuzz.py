"""Fuzz a real publisher and a real relay with a million hostile frames while subscribers are
served, and report what broke (issue 31).

Run ``.venv/bin/python bench/fuzz.py`` (``--frames 1000000`` by default); it prints one JSON
object last and writes ``bench/results/fuzz.json``.

Processes on this machine: the real publisher (Spark ``local[*]``, the ``agents`` simulation),
one real relay, ``--workers`` hostile processes (``fanout.testing.hostile``), and in this process
``--subscribers`` well-behaved subscribers (``fanout.client``) with box views. The publisher
runs one micro-batch a second (``--trigger 1``), as a deployment's publisher with room to spare
would: unpaced (``--trigger 0``), Spark on ``local[2]`` takes every cycle this 2-core machine
has, and the subscribers' rate then measures how much CPU Spark loses to anything else running
here, not whether the servers keep serving. The run:

1. **baseline**: ``--seconds`` of the subscribers alone: updates a second (again after the
   attack: the baseline is the mean of the two, as the machine's load drifts);
2. **attack**: in rounds of ``--round`` messages, the hostile processes send over
   ``--connections`` connections at once (each replaced when the server closes it), until the
   servers have read ``--frames`` of them (their ``*_frames_received_total`` counters: frames
   written after a server closed a connection are never read, so what is sent is no measure):
   valid frames of every direction mutated byte by byte, raw bytes and text; to the relay as a
   subscriber (with and
   without a ``Hello``) and to the publisher as a relay, a reader and a producer. Meanwhile the
   subscribers' updates a second are measured again. The hostile processes run at niceness
   ``--nice`` (19): on one machine the attackers' own CPU would otherwise be taken from the
   servers, which a real attacker's (on machines of its own) is not; what the servers spend on
   the attack is theirs and counted.

Reported:

* ``frames``, ``frames_per_s``: hostile frames the servers read, and how fast; ``frames_sent``:
  what the attackers wrote; ``rounds``;
* ``violations``: answers that are not the documented ones (an ``Error`` frame with a code, or a
  close with 1000, 1008 or 1009), plus ``handler_crashes``, plus a server process that died;
* ``handler_crashes``: connections closed with 1011 (a handler that raised) plus tracebacks in
  either server's log (bad input may log one line, never a traceback);
* ``good_rate_ratio``: the subscribers' update rate under attack over the baseline (>= 0.9 is
  the target);
* ``errors``, ``closes``: the answers by code;
* ``cpu_per_s_alone``, ``cpu_per_s_attacked``: CPU seconds a second of the relay, the
  publisher's Python process and its Spark JVM, without and with the attack (what it costs);
* ``logs``: where the servers' logs were kept, when a handler crashed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fanout.client import connect
from fanout.launch import Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.hostile import FuzzPlan, HostileProcess, Tally
from fanout.testing.machine import cpu_seconds, describe, tree, write_results
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Hello

RESULTS = Path(__file__).parent / "results" / "fuzz.json"


def hello(role: str) -> bytes:
    return codec.encode(Hello(version=PROTOCOL_VERSION, role=role, name="fuzz"))  # type: ignore[arg-type]


class Subscribers:
    """Well-behaved subscribers counting their updates."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.count = count
        self.updates = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for n in range(self.count):
            ready = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._follow(n, ready)))
            await asyncio.wait_for(ready.wait(), 120)

    async def _follow(self, n: int, ready: asyncio.Event) -> None:
        corner = 100.0 * (n % 8)
        async with connect(self.url) as subscriber:
            view = await subscriber.subscribe(Box((corner, corner), (corner + 150, corner + 150)))
            ready.set()
            async for _ in view:
                self.updates += 1

    async def rate(self, seconds: float) -> float:
        """Updates a second over the next ``seconds``, over all subscribers."""
        before, started = self.updates, time.monotonic()
        await asyncio.sleep(seconds)
        return (self.updates - before) / (time.monotonic() - started)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def frames_read(urls: tuple[str, ...]) -> float:
    """Frames the servers at ``urls`` have read from their connections so far (``/metrics``)."""
    total = 0.0
    for url in urls:
        counters = scrape(url)
        total += sum(v for k, v in counters.items() if k.endswith("_frames_received_total"))
    return total


def tracebacks(log: Path) -> int:
    return log.read_text(errors="replace").count("Traceback (most recent call last)")


async def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    hostile: list[HostileProcess] = []
    try:
        async with Children() as children:
            publisher = await children.start(
                "publisher",
                [
                    *("--port", "0", "--state-dir", str(root / "publisher")),
                    *("--agents", str(args.agents), "--trigger", str(args.trigger)),
                ],
                root / "publisher.log",
            )
            relay = await children.start(
                "relay",
                ["--publisher", publisher.url, "--port", "0", "--workers", "1"],
                root / "relay.log",
            )
            subscribers = Subscribers(relay.url, args.subscribers)
            await subscribers.start()
            for _ in range(30):  # warm up: until the pipeline's updates flow
                if await subscribers.rate(5.0) > 0:
                    break
            cpu = Cpu(publisher.process.pid, relay.process.pid)
            cpu.mark()
            baseline = await subscribers.rate(args.seconds)
            cpu.mark()
            targets = (
                (relay.url, True),
                (relay.url, False),
                (relay.url, True),
                (publisher.url, hello("relay")),
                (publisher.url, hello("reader")),
                (publisher.url, hello("producer")),
            )
            per_connection = -(-args.round // args.connections)
            connections = -(-args.connections // args.workers)
            servers = (relay.url, publisher.url)
            before = await asyncio.to_thread(frames_read, servers)
            started = time.monotonic()
            rates: list[float] = []
            tally = Tally()
            read, rounds = 0.0, 0
            while read < args.frames:  # rounds of attack until the servers have read enough
                hostile = [
                    HostileProcess(
                        FuzzPlan(targets, connections, per_connection, seed=rounds * 100 + worker),
                        args.nice,
                    )
                    for worker in range(args.workers)
                ]
                while any(process.process.is_alive() for process in hostile):
                    rates.append(await subscribers.rate(args.seconds))
                for process in hostile:
                    tally.merge(await asyncio.to_thread(process.done, 60.0))
                read = await asyncio.to_thread(frames_read, servers) - before
                rounds += 1
                print(f"round {rounds}: the servers read {read:.0f} frames", file=sys.stderr)
            cpu.mark()
            elapsed = time.monotonic() - started
            after = await subscribers.rate(args.seconds)
            await subscribers.stop()
            alive = {
                "publisher": publisher.process.returncode is None,
                "relay": relay.process.returncode is None,
            }
            # Counted before the servers are stopped: a micro-batch cut off by the stop is the
            # bench's doing, not the attack's (Spark's cancelled job is logged with a traceback).
            logged = tracebacks(root / "publisher.log") + tracebacks(root / "relay.log")
    finally:
        for process in hostile:
            process.stop()
    crashes = tally.closes[1011] + logged
    attacked = sorted(rates)[len(rates) // 2] if rates else 0.0
    # The machine's load drifts (it is shared): the rate alone is sampled before and after the
    # attack, and the attack is compared with their mean.
    alone = (baseline + after) / 2
    return {
        "frames": int(read),
        "frames_per_s": round(read / elapsed, 1),
        "frames_sent": tally.frames,
        "rounds": rounds,
        "violations": tally.violation_count + crashes + sum(not up for up in alive.values()),
        "handler_crashes": crashes,
        "good_rate_ratio": round(attacked / alone, 3) if alone else 0.0,
        "baseline_updates_per_s": round(alone, 1),
        "before_updates_per_s": round(baseline, 1),
        "after_updates_per_s": round(after, 1),
        "attack_updates_per_s_median": round(attacked, 1),
        "attack_updates_per_s": [round(rate, 1) for rate in rates],
        "seconds": round(elapsed, 1),
        "connections_opened": tally.connections,
        "refused_to_connect": tally.refused_to_connect,
        "errors": dict(tally.errors),
        "closes": {str(code): count for code, count in sorted(tally.closes.items())},
        "violations_seen": tally.violations,
        "alive": alive,
        # CPU seconds a second of each server, alone (the baseline) and under attack: what the
        # attack costs them; the JVM is the publisher's Spark.
        "cpu_per_s_alone": cpu.rates(0),
        "cpu_per_s_attacked": cpu.rates(1),
    }


class Cpu:
    """CPU time of the servers at marks: the relay, the publisher's Python process and its
    Spark JVM (the publisher's descendants)."""

    def __init__(self, publisher: int, relay: int) -> None:
        self.publisher = publisher
        self.relay = relay
        self.marks: list[tuple[float, dict[str, float]]] = []

    def mark(self) -> None:
        own = cpu_seconds(self.publisher)
        jvm = sum(cpu_seconds(pid) for pid in tree(self.publisher)[1:])
        used = {"relay": cpu_seconds(self.relay), "publisher": own, "spark_jvm": jvm}
        self.marks.append((time.monotonic(), used))

    def rates(self, span: int) -> dict[str, float]:
        """CPU seconds a second of each between mark ``span`` and the next."""
        (began, before), (ended, after) = self.marks[span], self.marks[span + 1]
        return {name: round((after[name] - before[name]) / (ended - began), 3) for name in after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--frames", type=int, default=1_000_000, help="hostile frames the servers must read"
    )
    parser.add_argument(
        "--round",
        type=int,
        default=1_000_000,
        help="hostile frames sent per round; rounds go on until the servers read --frames",
    )
    parser.add_argument("--connections", type=int, default=48, help="hostile connections at once")
    parser.add_argument("--workers", type=int, default=2, help="hostile processes")
    parser.add_argument("--subscribers", type=int, default=8, help="well-behaved subscribers")
    parser.add_argument("--agents", type=int, default=2_000, help="simulated agents")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of one rate sample")
    parser.add_argument(
        "--trigger",
        type=float,
        default=1.0,
        help="the publisher's seconds between micro-batches (default 1; 0: as fast as it can)",
    )
    parser.add_argument(
        "--nice", type=int, default=19, help="niceness added to the hostile processes (default 19)"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    machine, calibration = describe(), calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-fuzz-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
        if results["handler_crashes"]:  # keep the servers' logs: the tracebacks are in them
            kept = Path(tempfile.mkdtemp(prefix="fanout-fuzz-logs-"))
            for log in Path(tmp).glob("*.log"):
                shutil.copy(log, kept)
            results["logs"] = str(kept)
    results["arguments"] = vars(args)
    results["machine"] = machine
    results["calibration"] = calibration
    write_results(results, None if args.no_save else RESULTS)
    return 0 if results["violations"] == 0 and results["good_rate_ratio"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
