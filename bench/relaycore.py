"""Benchmark the relay's core in one process: CPU per push and per view move, no sockets.

Run ``.venv/bin/python bench/relaycore.py`` (``--subscribers N``, ``--ticks T``); it prints one
JSON object and writes ``bench/results/relaycore.json`` (not with ``--no-save``). ``--profile``
also prints the hottest functions (and writes nothing: the profiler slows what it measures).
``bench/interpreters.py`` runs it under several Python builds.

``bench/relay.py`` measures the whole relay over real sockets, where the machine's other
processes and the network stack make every number noisy; this one runs ``RelayCore`` alone, fed
ticks directly, so that a change to cutting, scheduling or coverage planning can be compared with
the code before it in a minute. The workload is ``bench/relay.py``'s: 100,000 entities that all
move every tick (``--moving 0.001``: one in a thousand, the rest still: most views quiet), N
subscribers with 125 x 125 box views (distinct) at 10 pushes/s, each view moving once a second
(a tenth of them each tick).

Reports:

* ``serve_us_per_push``: wall time of ``RelayCore.pushes`` (ending the epoch, scheduling,
  cutting, transforming, encoding) per push;
* ``move_us``: wall time of ``RelayCore.on_subscribe`` per view change (coverage planning
  included);
* ``subscribe_us``: the same for the first subscription of each subscriber;
* ``serve_cpu_us_per_push``, ``move_cpu_us``: the same as the first two in this thread's CPU
  time (``time.thread_time``), which other processes on a shared machine disturb far less than
  wall time: the measure to compare two checkouts with (``bench/checkouts.py``) when the machine
  is not quiet.

Ingest (writing each tick's rows into the double buffer) is not timed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.world import Entities, routes
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Acquire, Batch, Catalog, DatasetInfo, Subscribe

RESULTS = Path(__file__).parent / "results" / "relaycore.json"
COLUMNS = {"id": "<i8", "x": "<f8", "y": "<f8", "kind": "<i4", "tick": "<i8", "ts": "<f8"}
RATE = 10.0
TICK = 0.1


class Feed:
    """Ticks of moving entities, written straight into a relay core (the scripted publisher)."""

    def __init__(self, core: RelayCore, entities: int, moving: float = 1.0) -> None:
        self.core, self.entities, self.seq = core, Entities(entities, moving=moving), 0

    def tick(self, snapshots: list[int]) -> None:
        """One batch: every row the first time, then the rows that moved."""
        entities = self.entities
        at = np.arange(len(entities.ids))
        if self.seq:
            entities.step(TICK)
            at = np.flatnonzero(entities.moving)
        rows = {
            "id": entities.ids[at],
            "x": entities.xy[0, at],
            "y": entities.xy[1, at],
            "kind": entities.kind[at],
            "tick": np.full(len(at), self.seq, dtype=np.int64),
            "ts": np.zeros(len(at)),
        }
        batch = Batch(
            "agents",
            1,
            self.seq,
            self.seq,
            float(self.seq),
            encode_columns(rows),
            encode_columns({"id": np.zeros(0, dtype=np.int64)}),
            snapshots,
        )
        intake = self.core.admit(batch)
        assert intake is not None
        intake.write()
        self.core.finish(intake)
        self.seq += 1


def run(
    subscribers: int, ticks: int, profiler: cProfile.Profile | None, moving: float = 1.0
) -> dict[str, Any]:
    core = RelayCore(Policy())
    core.on_catalog(Catalog([DatasetInfo("agents", "id", COLUMNS, "space", ["x", "y"])]))
    core.on_upstream_connected()
    paths = routes(subscribers, 1, seed=subscribers)
    acquired: list[int] = []
    started = time.perf_counter()
    for client, path in enumerate(paths, 1):
        core.on_connect(client)
        for send in core.on_subscribe(client, Subscribe(1, "agents", path.box(0), rate=RATE), 0.0):
            if send.to == UPSTREAM and isinstance(send.frame, Acquire):
                acquired.append(send.frame.prim)
    subscribe_s = time.perf_counter() - started
    feed = Feed(core, 100_000, moving)
    feed.tick(acquired)  # the snapshots of everything acquired
    now = 1.0
    core.pushes(now, lambda client: True)  # first pushes: whole views
    serve_s = move_s = serve_cpu = move_cpu = 0.0
    pushes = moves = 0
    if profiler is not None:
        profiler.enable()
    for tick in range(1, ticks + 1):
        now += TICK
        feed.tick([])
        started, cpu = time.perf_counter(), time.thread_time()
        pushes += len(core.pushes(now, lambda client: True))
        serve_s += time.perf_counter() - started
        serve_cpu += time.thread_time() - cpu
        started, cpu = time.perf_counter(), time.thread_time()
        for client in range(1 + tick % 10, subscribers + 1, 10):  # each view once a second
            request = Subscribe(1, "agents", paths[client - 1].box(tick), rate=RATE)
            core.on_subscribe(client, request, now)
            moves += 1
        move_s += time.perf_counter() - started
        move_cpu += time.thread_time() - cpu
    if profiler is not None:
        profiler.disable()
    return {
        "subscribers": subscribers,
        "ticks": ticks,
        "pushes": pushes,
        "serve_us_per_push": round(serve_s / max(pushes, 1) * 1e6, 1),
        "move_us": round(move_s / max(moves, 1) * 1e6, 1),
        "serve_cpu_us_per_push": round(serve_cpu / max(pushes, 1) * 1e6, 1),
        "move_cpu_us": round(move_cpu / max(moves, 1) * 1e6, 1),
        "subscribe_us": round(subscribe_s / subscribers * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=2000)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument(
        "--moving",
        type=float,
        default=1.0,
        help="fraction of the entities that move (default 1; 0.001: a mostly idle world, most"
        " views quiet: relay.kinds.quiet)",
    )
    parser.add_argument("--profile", action="store_true", help="print the hottest functions")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    profiler = cProfile.Profile() if args.profile else None
    result = {**run(args.subscribers, args.ticks, profiler, args.moving), "moving": args.moving}
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        print(json.dumps(result))
        return
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else RESULTS,
    )


if __name__ == "__main__":
    main()
