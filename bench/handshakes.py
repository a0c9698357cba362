"""How long a relay takes to answer subscribers connecting while it pushes, on each event loop.

Run ``.venv/bin/python bench/handshakes.py --subscribers 300 --runs 2``: a scripted publisher
(``fanout.testing.world``, 100,000 moving entities, 10 ticks/s) and a relay process
(``RelayProcess``), then ``bench/relay.py``'s subscribers connecting 32 at a time, each
subscribing as soon as it is welcomed, so that the relay pushes to the earlier ones (and writes
each tick on its writer thread) while the later ones connect. For each loop in turn
(alternating, ``--runs`` times): the opening handshakes' p50, p90 and max (TCP connect to the
101 answer), Hello to Welcome likewise, and handshakes that timed out (60 s). Prints one JSON
object last; the committed one is ``bench/results/handshakes.json`` (docs/benchmarks/relay.md,
"Where a push's time goes").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from picows import ws_connect

from fanout.relay.config import EventLoop, Process, RelayConfig, Upstream
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe
from fanout.testing.relays import RelayProcess
from fanout.testing.world import publisher_main, routes

sys.path.insert(0, str(Path(__file__).parent))
from picowsclient import HANDSHAKE
from relayclients import CONNECT_CONCURRENCY, Subscriber  # bench/relay.py's clients


def quantiles(values: list[float]) -> dict[str, float]:
    """p50, p90 and max of ``values``, in seconds."""
    values = sorted(values) or [float("nan")]
    pick = {"p50": values[len(values) // 2], "p90": values[int(len(values) * 0.9)]}
    return {k: round(v, 3) for k, v in {**pick, "max": values[-1]}.items()}


async def connect_all(url: str, count: int) -> dict[str, Any]:
    """Connect ``count`` subscribers to ``url``; how long their handshakes and Hellos took."""
    started = time.time()
    subscribers = [Subscriber(url, route, started) for route in routes(count, 1, seed=1)]
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    handshakes: list[float] = []
    welcomes: list[float] = []
    failed: list[str] = []

    async def one(subscriber: Subscriber) -> None:
        async with gate:
            began = time.perf_counter()
            try:
                await ws_connect(
                    lambda: subscriber,
                    url,
                    max_frame_size=1 << 30,
                    websocket_handshake_timeout=HANDSHAKE,
                )
                handshaken = time.perf_counter()
                await asyncio.wait_for(subscriber.welcomed, HANDSHAKE)
            except (TimeoutError, OSError) as exc:
                failed.append(repr(exc))
                return
            handshakes.append(handshaken - began)
            welcomes.append(time.perf_counter() - handshaken)
            subscriber._subscribe(subscriber.route.step(time.time() - started))

    await asyncio.gather(*(one(s) for s in subscribers))
    for subscriber in subscribers:
        subscriber.close()
    return {"handshake_s": quantiles(handshakes), "welcome_s": quantiles(welcomes),
            "failed": len(failed), "took_s": round(time.time() - started, 1)}  # fmt: skip


def trial(loop: EventLoop, count: int, switch_interval: float) -> dict[str, Any]:
    """One publisher, one relay on ``loop``, ``count`` subscribers connecting."""
    context = mp.get_context("spawn")
    mine, theirs = context.Pipe()
    publisher = context.Process(target=publisher_main, args=(theirs, 100_000))
    publisher.start()
    theirs.close()
    process = Process(loop=loop, switch_interval=switch_interval)
    relay = RelayProcess(RelayConfig(Upstream(mine.recv()), name="handshakes", process=process))
    try:
        return asyncio.run(connect_all(relay.ready(), count))
    finally:
        relay.stop()
        mine.send("stop")
        publisher.join(10)
        if publisher.is_alive():
            publisher.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2, help="trials of each loop, alternating")
    parser.add_argument("--switch-interval", type=float, default=Process().switch_interval)
    args = parser.parse_args()
    calibration = calibrate()
    loops: list[EventLoop] = ["asyncio", "uvloop"]
    trials: dict[str, list[dict[str, Any]]] = {loop: [] for loop in loops}
    for run in range(args.runs):
        for loop in loops if run % 2 == 0 else loops[::-1]:
            result = trial(loop, args.subscribers, args.switch_interval)
            trials[loop].append(result)
            print(loop, json.dumps(result), file=sys.stderr, flush=True)
    p90 = {
        loop: statistics.median(t["handshake_s"]["p90"] for t in runs)
        for loop, runs in trials.items()
    }
    summary = {
        "subscribers": args.subscribers,
        "switch_interval": args.switch_interval,
        "handshake_p90_s": p90,
        "trials": trials,
        "machine": describe(),
        "calibration": calibration,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
