"""What idle subscribers cost the relay's core in CPU: housekeeping and ticks, no sockets.

Run ``.venv/bin/python bench/idlecost.py --idle 4000`` (compare two checkouts with
``bench/checkouts.py ... -- idlecost.py``); it prints one JSON object last and writes nothing
(``--out`` to write it). ``bench/submemory.py``'s idle subscribers, in one process: each has a
128 x 128 box view of its own outside the world, where no row ever is; ``bench/relaycore.py``'s
scripted world ticks (``--entities``) beside them. Reports, in this thread's CPU time
(``time.thread_time``, which a loaded machine disturbs far less than wall time):

* ``housekeeping_cpu_ms``: one ``RelayCore.housekeeping`` (the relay runs it twice a second:
  releasing unneeded primitives looks at every view and every primitive);
* ``tick_cpu_ms``: ending a tick's epoch and serving what is due (``RelayCore.pushes``: each idle
  view gets a ``NoUpdate`` a tick, not cut: ``relay.kinds.quiet``), and
  ``tick_cpu_us_per_idle``, that over the idle views;
* ``cores_at_10hz``: what ticks at 10 a second and housekeeping twice a second would take of a
  core, the figure ``docs/benchmarks/submemory.md`` saw as 0.58 cores at 10,000.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.wire.messages import Acquire, Catalog, DatasetInfo, Subscribe
from relaycore import COLUMNS, RATE, TICK, Feed
from submemoryclients import Still


def run(idle: int, entities: int, ticks: int) -> dict[str, float | int]:
    core = RelayCore(Policy())
    core.on_catalog(Catalog([DatasetInfo("agents", "id", COLUMNS, "space", ["x", "y"])]))
    core.on_upstream_connected()
    acquired: list[int] = []
    for client in range(1, idle + 1):
        core.on_connect(client)
        request = Subscribe(1, "agents", Still(client - 1).box(0), rate=RATE)
        for send in core.on_subscribe(client, request, 0.0):
            if send.to == UPSTREAM and isinstance(send.frame, Acquire):
                acquired.append(send.frame.prim)
    feed = Feed(core, entities)
    feed.tick(acquired)
    now = 1.0
    core.pushes(now, lambda client: True)
    housekeeping, serving = [], []
    for _ in range(ticks):
        now += TICK
        feed.tick([])
        cpu = time.thread_time()
        core.pushes(now, lambda client: True)
        serving.append(time.thread_time() - cpu)
        cpu = time.thread_time()
        core.housekeeping(now)
        housekeeping.append(time.thread_time() - cpu)
    tick_s, housekeeping_s = statistics.median(serving), statistics.median(housekeeping)
    return {
        "idle": idle,
        "primitives": len(core.upstream.of("agents")),
        "housekeeping_cpu_ms": round(housekeeping_s * 1e3, 2),
        "tick_cpu_ms": round(tick_s * 1e3, 2),
        "tick_cpu_us_per_idle": round(tick_s / max(idle, 1) * 1e6, 2),
        "cores_at_10hz": round(10 * tick_s + 2 * housekeeping_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=4000, help="idle subscribers")
    parser.add_argument("--entities", type=int, default=10_000, help="the world's, all moving")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--out", type=Path, help="write the JSON object here too")
    args = parser.parse_args()
    calibration = calibrate()
    result = run(args.idle, args.entities, args.ticks)
    write_results({**result, "machine": describe(), "calibration": calibration}, args.out)


if __name__ == "__main__":
    main()
