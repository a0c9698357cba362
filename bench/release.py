"""Benchmark the relay's check of which topic, path and SQL primitives no subscription needs.

Run ``.venv/bin/python bench/release.py``; it prints one JSON object and writes
``bench/results/release.json``.

Every ``housekeeping`` (twice a second) the relay asks, for each dataset, which upstream
primitives it may release: those without which every subscription's needs stay covered
(``TableViews.unneeded`` for SQL, topic and path datasets; regions have
``planner.unneeded``). It runs on the relay's event loop, so its time is time no subscriber is
served (``TableViews`` answers anew only when the primitives or the needs changed; this times
an answer, ``relay.core.release.unneeded``). The workload per kind, for N subscribers:

* topics: N filters over 50 sites, ``site/S/dev/I`` (most), ``site/S/+/I`` and ``site/S/#``
  (every tenth and every fiftieth);
* paths: N object paths ``/siteS/devI`` and, every twentieth, ``/siteS/.all``;
* SQL: N primitives of one table, ``v BETWEEN a AND a + 10`` with ``a`` spread over 0-1,000.

The relay holds one primitive per need (as acquired for each subscription's residual) and
N / 10 more that no subscription needs any longer (views that moved on): the answer must be
those, plus any a wider primitive covers. Each size is timed once (``ms``); sizes stop growing
once one takes longer than ``--give-up`` seconds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from fanout.relay.core.release import unneeded
from fanout.relay.core.upstream import Primitive
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.views import View
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql
from fanout.views.topic import TopicFilter

RESULTS = Path(__file__).parent / "results" / "release.json"
SITES = 50


def topic_need(i: int) -> View:
    site = i % SITES
    if i % 50 == 0:
        return TopicFilter(f"site/{site}/#")
    if i % 10 == 0:
        return TopicFilter(f"site/{site}/+/{i}")
    return TopicFilter(f"site/{site}/dev/{i}")


def path_need(i: int) -> View:
    site = i % SITES
    return ObjectPath(f"/site{site}/.all" if i % 20 == 0 else f"/site{site}/dev{i}")


def sql_need(i: int) -> View:
    low = (i * 7919) % 1000
    return Sql(f"SELECT * FROM t WHERE v BETWEEN {low} AND {low + 10}").primitives()[0]


KINDS: dict[str, Callable[[int], View]] = {"topic": topic_need, "path": path_need, "sql": sql_need}


def measure(need: Callable[[int], View], subscribers: int) -> dict[str, float | int]:
    needs = [need(i) for i in range(subscribers)]
    stale = [need(subscribers + i) for i in range(subscribers // 10)]  # moved on: unneeded
    views = list(dict.fromkeys(stale + needs))  # the stale ones are the oldest
    prims = [Primitive(number, "d", view, ready=True) for number, view in enumerate(views)]
    began = time.perf_counter()
    gone = unneeded(prims, needs)
    elapsed = time.perf_counter() - began
    return {
        "subscribers": subscribers,
        "primitives": len(prims),
        "released": len(gone),
        "ms": round(elapsed * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200,400,800,1600,3200")
    parser.add_argument("--give-up", type=float, default=20.0, help="seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started, calibration = describe(), calibrate()
    sizes = [int(size) for size in args.sizes.split(",")]
    results: dict[str, object] = {}
    for kind, need in KINDS.items():
        runs = []
        for size in sizes:
            runs.append(measure(need, size))
            if runs[-1]["ms"] > args.give_up * 1000:
                break
        results[kind] = runs
    results["machine"] = started
    results["calibration"] = calibration
    write_results(results, args.out)


if __name__ == "__main__":
    main()
