"""Benchmark one relay with a subscriber that runs many expensive SQL queries beside a calm one.

Run ``.venv/bin/python bench/sqlshare.py`` (``--quick`` for a short run); it prints one JSON
object and writes ``bench/results/sqlshare.json``.

Processes, all on this machine:

* **publisher** (this process): a scripted publisher speaking the real protocol
  (``fanout.testing.publisher``), serving one SQL dataset, ``orders`` (``--rows`` rows:
  ``order_id``, ``customer``, ``amount``), 10 ticks/s; each tick changes ``--changed`` rows'
  amounts. ``tick_time`` is the batch's send time.
* **relay**: ``fanout relay`` (the real command, in a process of its own, its log in a temporary
  folder), with the SQL time budget of the trial.
* **subscribers** (this process, through the client library): a *calm* connection with one
  cheap view (``SELECT * FROM orders WHERE order_id < 100``) at 10 pushes/s, and a *heavy*
  connection with ``--queries`` different views, each a non-key self-join of ``--join-rows``
  rows with the whole table (tens of milliseconds each in DuckDB, under the relay's 0.5 s time
  limit, and no result rows), also at 10 pushes/s. Each tick changes the table, so every view
  is evaluated anew for every push.

Two trials, the same workload: ``unlimited`` (``--sql-share 1 --sql-burst 1e9``: SQL may take
the whole event loop, as before the budget existed) and ``budget`` (the relay's defaults). Per
trial, over ``--measure`` seconds:

* ``calm_delivered``: the fraction of the ticks published for which the calm view got a push;
* ``calm_p50_ms`` / ``calm_p99_ms``: tick sent to push received, for the calm view;
* ``heavy_pushes``: pushes the heavy connection's views got, all of them together;
* ``sql_seconds_per_second``: the relay's time running SQL per second of the window
  (``relay_sql_query_seconds_total``), all connections together;
* ``put_off``: ``relay_sql_pushes_put_off_total`` over the window.

``query_ms``: one heavy query's time in DuckDB alone, measured here on the same rows.
``calm_p99_ratio``: the calm view's p99 without the budget over its p99 with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from fanout.client import connect
from fanout.launch import running
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.views.sql import parse as sql
from fanout.wire.messages import Catalog, DatasetInfo

RESULTS = Path(__file__).parent / "results" / "sqlshare.json"
ORDERS = DatasetInfo(
    "orders",
    "order_id",
    {"order_id": "<i8", "customer": "str", "amount": "<f8"},
    "sql",
    ["order_id", "customer", "amount"],
)
TICK = 0.1
CALM = "SELECT * FROM orders WHERE order_id < 100"


def heavy(query: int, join_rows: int) -> str:
    """A distinct expensive view: every pair of ``join_rows`` orders with all orders compared
    (a nested loop: the condition is no equality of two columns, and the table's statistics
    cannot rule it out), matching none (no two random amounts add up exactly)."""
    return (
        f"SELECT a.order_id, a.amount FROM orders a JOIN orders b"
        f" ON a.amount + b.amount = {1000.5 + query / 1000} WHERE a.order_id < {join_rows}"
    )


class Orders:
    """The ``orders`` table, served by a scripted publisher: every row at first and with new
    snapshots, then the changed rows each tick."""

    def __init__(self, rows: int, changed: int) -> None:
        self.rng = np.random.default_rng(7)
        self.ids = np.arange(rows, dtype=np.int64)
        self.customers = np.array([f"c{i % 97}" for i in range(rows)], dtype=object)
        self.amounts = self.rng.uniform(1.0, 1000.0, rows)
        self.changed = changed
        self.publisher = ScriptedPublisher(Catalog([ORDERS]), name="bench")
        self.sent: dict[int, float] = {}  # tick -> when its batch was sent

    @property
    def seq(self) -> int:
        """The next batch's seq (and tick)."""
        return self.publisher.next_seq.get(ORDERS.name, 0)

    async def tick(self) -> None:
        if not self.publisher.relays:
            return
        snapshots = self.publisher.take_fresh()
        if snapshots or not self.sent:
            at = np.arange(len(self.ids))
        else:
            at = self.rng.choice(len(self.ids), self.changed, replace=False)
            self.amounts[at] = self.rng.uniform(1.0, 1000.0, len(at))
        upserts = {
            "order_id": self.ids[at],
            "customer": self.customers[at],
            "amount": self.amounts[at],
        }
        batch = await self.publisher.send(upserts, snapshots=snapshots)
        self.sent[batch.tick] = batch.tick_time


def query_ms(rows: int, join_rows: int) -> float:
    """One heavy query's time in DuckDB alone, on rows like the publisher's (median of 5)."""
    rng = np.random.default_rng(7)
    db = duckdb.connect(":memory:")
    rows_ = pa.table({"order_id": np.arange(rows), "amount": rng.uniform(1.0, 1000.0, rows)})
    db.register("rows_", rows_)
    db.execute("CREATE TABLE orders AS SELECT * FROM rows_")  # a table, as in the relay
    times = []
    for query in range(5):
        started = time.perf_counter()
        db.sql(heavy(query, join_rows)).to_arrow_table()
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1000


async def trial(args: argparse.Namespace, name: str, limits: list[str]) -> dict[str, Any]:
    orders = Orders(args.rows, args.changed)
    logs = Path(tempfile.mkdtemp(prefix="fanout-bench-sqlshare-"))
    async with serving(orders.publisher) as url:
        args_ = ["--publisher", url, "--port", "0", "--workers", "1", *limits]
        async with running("relay", args_, logs / f"relay-{name}.log") as relay:
            return await _measure(args, name, orders, relay.url)


async def _measure(args: argparse.Namespace, name: str, orders: Orders, url: str) -> dict[str, Any]:
    ticking = asyncio.create_task(_tick(orders))
    latencies: list[float] = []
    calm_ticks: set[int] = set()
    heavy_pushes = 0
    measuring = False

    async def follow_calm(view: Any) -> None:
        async for update in view:
            if measuring:
                calm_ticks.add(update.tick)
                latencies.append(update.received_at - orders.sent[update.tick])

    async def follow_heavy(view: Any) -> None:
        nonlocal heavy_pushes
        async for _ in view:
            if measuring:
                heavy_pushes += 1

    try:
        async with connect(url) as calm, connect(url) as heavy_connection:
            followers = [
                asyncio.create_task(follow_calm(await calm.subscribe(sql(CALM), "orders")))
            ]
            for query in range(args.queries):
                view = await heavy_connection.subscribe(sql(heavy(query, args.join_rows)), "orders")
                followers.append(asyncio.create_task(follow_heavy(view)))
            await asyncio.sleep(args.warmup)
            before = await asyncio.to_thread(scrape, url)
            first_tick, measuring = orders.seq, True
            await asyncio.sleep(args.measure)
            measuring, last_tick = False, orders.seq - 1
            after = await asyncio.to_thread(scrape, url)
            for follower in followers:
                follower.cancel()
    finally:
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    published = range(first_tick, last_tick + 1)
    delivered = len(calm_ticks.intersection(published)) / max(1, len(published))
    ms = np.array(latencies) * 1000 if latencies else np.array([float("nan")])
    put_off = "fanout_relay_sql_pushes_put_off_total"
    seconds = "fanout_relay_sql_query_seconds_total"
    return {
        "trial": name,
        "ticks": len(published),
        "calm_delivered": round(delivered, 3),
        "calm_p50_ms": round(float(np.percentile(ms, 50)), 1),
        "calm_p99_ms": round(float(np.percentile(ms, 99)), 1),
        "heavy_pushes": heavy_pushes,
        "put_off": int(after[put_off] - before[put_off]),
        "sql_seconds_per_second": round((after[seconds] - before[seconds]) / args.measure, 3),
    }


async def _tick(orders: Orders) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        await orders.tick()
        next_at += TICK
        await asyncio.sleep(max(0.0, next_at - loop.time()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--changed", type=int, default=200)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--join-rows", type=int, default=1_000)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--measure", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="a short run (not written)")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.measure = 2.0, 5.0
    machine, calibration = describe(), calibrate()
    alone = query_ms(args.rows, args.join_rows)
    trials = [
        asyncio.run(trial(args, "unlimited", ["--sql-share", "1", "--sql-burst", "1e9"])),
        asyncio.run(trial(args, "budget", [])),
    ]
    results = {
        "benchmark": "sqlshare",
        "machine": machine,
        "calibration": calibration,
        "workload": {
            "rows": args.rows,
            "changed_per_tick": args.changed,
            "heavy_queries": args.queries,
            "join_rows": args.join_rows,
            "measure_s": args.measure,
        },
        "query_ms": round(alone, 1),
        "trials": trials,
        "calm_p99_ratio": round(trials[0]["calm_p99_ms"] / trials[1]["calm_p99_ms"], 1),
    }
    write_results(results, None if args.quick else RESULTS)


if __name__ == "__main__":
    main()
