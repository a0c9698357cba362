"""Benchmark what snooping buys: loads that reach the publisher with snooping caches and without,
the hit ratio, and how long a committed update takes to reach the caches (``docs/caches.md``).

Run ``.venv/bin/python bench/snoopy.py`` (``--quick`` for a short run); it writes
``bench/results/snoopy.json`` and its last line is one JSON object. It starts a throwaway
PostgreSQL, a throwaway ``nats-server`` and a real publisher (Spark, ``local[*]``) with one table
of ``--items`` items published on the bus, then, ``--runs`` times:

1. **with snooping**: ``--caches`` caches in this process, each on its own NATS connection,
   find the keys they will read (``find_by_key``), then read ``--reads`` keys each,
   concurrently, drawn from a Zipf distribution (exponent ``--zipf``) with a seed per cache;
   every read that faults sends one ``LOAD`` to the publisher; a read of an object another
   cache loaded since this one found it is a hit;
2. **without snooping**: as many new caches with ``snoop=False`` (each takes only the replies to
   its own loads), the same seeds, so the same reads; ``loads_with_snooping`` and
   ``loads_without_snooping`` are the ``LOAD`` messages each group sent, in the same run;
3. **updates**: a writer commits ``--updates`` updates of Zipf-drawn items to PostgreSQL, each
   stamped with its commit time, while the snooping caches hold them; each cache notes when each
   ``UPDATENOTIFY`` arrives. ``update_to_cache_*_ms`` is commit to cache;
   ``commit_to_publish_*_ms`` is commit to the connector publishing it (the table is captured
   by logical decoding: the publisher's live tail publishes a commit at once, its micro-batch
   repeats it; docs/caches.md, "A database commit at once"), ``publish_to_cache_*_ms`` the bus
   and the cache;
4. **writes**: the same updates of an ingest dataset (``note``) through the producer API, which
   the connector publishes as soon as they are logged, before Spark's micro-batch
   (docs/caches.md, "Writes at once"): ``write_to_cache_*_ms`` is the producer's call to cache.
   A database commit takes the live tail instead (item 3).

Each figure is the median of the runs, with its spread (min, max) beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from fanout.cache.client import SnoopyCache
from fanout.cache.core import Change
from fanout.client.publisher import open_producer
from fanout.launch import Children
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.nats import throwaway_nats
from fanout.testing.postgres import throwaway_postgres
from fanout.testing.wait import eventually
from fanout.wire.bus import Row

RESULTS = Path(__file__).parent / "results" / "snoopy.json"
CATEGORIES = ["computer.hardware.misc", "computer.software", "garden.tools"]
CONFIG = """
[bus]
url = "{nats}"
domain = "bench"

[datasets.item]
key = "id"
schema = {{ id = "long", category = "string", price = "double", stamp = "double" }}
source = {{ kind = "postgres", url = "{db}", table = "items" }}
bus = {{ label = "category" }}

[datasets.note]
key = "id"
schema = {{ id = "long", category = "string", price = "double", stamp = "double" }}
source = {{ kind = "ingest" }}
bus = {{ label = "category" }}
"""


def zipf_keys(items: int, exponent: float, count: int, seed: int) -> list[int]:
    """``count`` keys in 1..``items``, key k drawn with weight 1 / k**exponent."""
    weights = 1.0 / np.arange(1, items + 1) ** exponent
    rng = np.random.default_rng(seed)
    keys: list[int] = (rng.choice(items, size=count, p=weights / weights.sum()) + 1).tolist()
    return keys


def percentile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


async def read_group(
    url: str, args: argparse.Namespace, run: int, snoop: bool
) -> tuple[list[SnoopyCache], int, int, int]:
    """Connect the caches and let each read its keys; returns them (still connected), and the
    LOADs sent, hits and faults."""
    caches_range = range(args.caches)
    caches = [
        await SnoopyCache.connect(url, "bench", snoop=snoop, name=f"c{n}") for n in caches_range
    ]

    keys = [zipf_keys(args.items, args.zipf, args.reads, run * 1000 + n) for n in caches_range]
    # Found first, read later (as when an application lists items and then opens them): the
    # handles listen to their objects from the start, so another cache's load can warm them.
    handles = [
        {key: cache.find_by_key("item", key) for key in set(mine)}
        for cache, mine in zip(caches, keys, strict=True)
    ]
    await asyncio.sleep(1.0)  # every subscription reached the server

    async def reader(n: int) -> None:
        rng = random.Random(run * 1000 + n)
        for key in keys[n]:
            await handles[n][key].get()
            await asyncio.sleep(rng.uniform(0, 2 * args.pause))

    await asyncio.gather(*(reader(n) for n in caches_range))
    loads = sum(cache.shell.loads_sent for cache in caches)
    hits = sum(cache.counters.hits for cache in caches)
    faults = sum(cache.counters.faults for cache in caches)
    return caches, loads, hits, faults


async def updates(
    db: str, caches: list[SnoopyCache], args: argparse.Namespace, run: int
) -> dict[str, Any]:
    """Commit updates and time their arrival at every cache that holds the item."""
    total: list[float] = []
    to_publish: list[float] = []
    to_cache: list[float] = []

    def arrived(change: Change) -> None:
        if change.kind != "UPDATENOTIFY" or change.row is None:
            return
        now = time.time()
        stamp = float(change.row["stamp"])  # type: ignore[arg-type]
        total.append((now - stamp) * 1000)
        to_publish.append((change.sent - stamp) * 1000)
        to_cache.append((now - change.sent) * 1000)

    for cache in caches:
        cache.on_change(arrived)
    keys = zipf_keys(args.items, args.zipf, args.updates, 99 + run)
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as connection:
        for key in keys:
            await connection.execute(
                "UPDATE items SET price = price + 1, stamp = %s WHERE id = %s", (time.time(), key)
            )
            await asyncio.sleep(1 / args.rate)
    await asyncio.sleep(5)  # the last micro-batch
    return {
        "update_to_cache_p50_ms": percentile(total, 50),
        "update_to_cache_p99_ms": percentile(total, 99),
        "commit_to_publish_p50_ms": percentile(to_publish, 50),
        "publish_to_cache_p50_ms": percentile(to_cache, 50),
        "updates_received": len(total),
    }


async def writes(
    publisher: str, caches: list[SnoopyCache], args: argparse.Namespace, run: int
) -> dict[str, Any]:
    """Write updates through the producer API and time their arrival at every cache that holds
    the object (each cache holds the notes it will be told of: found and loaded first)."""
    total: list[float] = []

    def arrived(change: Change) -> None:
        if change.kind == "UPDATENOTIFY" and change.ref[0] == "note" and change.row is not None:
            total.append((time.time() - float(change.row["stamp"])) * 1000)  # type: ignore[arg-type]

    keys = zipf_keys(args.items, args.zipf, args.updates, 199 + run)
    held = sorted(set(keys))
    handles = [[cache.find_by_key("note", key) for key in held] for cache in caches]
    for cache, mine in zip(caches, handles, strict=True):
        await asyncio.gather(*(handle.get() for handle in mine))
        cache.on_change(arrived)
    async with open_producer(publisher) as producer:
        for key in keys:
            row = {"id": key, "category": CATEGORIES[key % 3], "price": 1.0, "stamp": time.time()}
            await producer.publish("note", rows=[row])
            await asyncio.sleep(1 / args.rate)
    await asyncio.sleep(5)  # the last micro-batch (its messages are repeats the caches drop)
    return {
        "write_to_cache_p50_ms": percentile(total, 50),
        "write_to_cache_p99_ms": percentile(total, 99),
        "writes_received": len(total),
    }


async def one_run(
    url: str, db: str, publisher: str, args: argparse.Namespace, run: int
) -> dict[str, Any]:
    snooping, with_loads, hits, faults = await read_group(url, args, run, snoop=True)
    plain, without_loads, _, _ = await read_group(url, args, run, snoop=False)
    for cache in plain:
        await cache.close()
    timing = await updates(db, snooping, args, run)
    timing |= await writes(publisher, snooping, args, run)
    for cache in snooping:
        await cache.close()
    return {
        "loads_with_snooping": with_loads,
        "loads_without_snooping": without_loads,
        "loads_ratio": round(without_loads / max(with_loads, 1), 2),
        "hit_ratio": round(hits / max(hits + faults, 1), 3),
        **timing,
    }


async def seed_notes(publisher: str, probe: SnoopyCache, items: int) -> None:
    """The notes, written through the producer API, once the caches can load the last."""
    async with open_producer(publisher) as producer:
        keys = np.arange(1, items + 1)
        await producer.publish(
            "note",
            rows={
                "id": keys,
                "category": np.array([CATEGORIES[k % 3] for k in keys], dtype=object),
                "price": np.ones(items),
                "stamp": np.zeros(items),
            },
        )
    last = probe.find_by_key("note", items)

    def loaded(row: Row | None) -> bool:
        return row is not None

    await eventually(last.get, loaded, timeout=300, what="the notes")


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with throwaway_postgres() as db, throwaway_nats() as bus, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(db, autocommit=True) as connection:
            connection.execute(
                "CREATE TABLE items (id bigint PRIMARY KEY, category text, price double"
                " precision, stamp double precision)"
            )
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO items VALUES (%s, %s, 1.0, 0)",
                    [(k, CATEGORIES[k % 3]) for k in range(1, args.items + 1)],
                )
        config = Path(tmp) / "fanout.toml"
        config.write_text(CONFIG.format(nats=bus.url, db=db))
        async with Children() as children:
            publisher = await children.start(
                "publisher",
                ["--config", str(config), "--port", "0", "--state-dir", f"{tmp}/state"],
                Path(tmp) / "publisher.log",
            )
            try:
                # Ready once a cache can load an item (the first micro-batch is published).
                # A loaded machine's first micro-batch may take minutes.
                probe = await SnoopyCache.connect(bus.url, "bench", load_wait=600)
                await probe.find_by_key("item", 1).get()
                await seed_notes(publisher.url, probe, args.items)
                await probe.close()
                runs = [
                    await one_run(bus.url, db, publisher.url, args, run) for run in range(args.runs)
                ]
            finally:
                await publisher.stop()
    return summarize(runs)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the runs, and its spread."""
    out: dict[str, Any] = {}
    for name in runs[0]:
        values = [run[name] for run in runs]
        out[name] = statistics.median(values)
        out[f"{name}_spread"] = [min(values), max(values)]
    out["runs"] = runs
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caches", type=int, default=20)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=200, help="reads per cache")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the keys")
    parser.add_argument("--pause", type=float, default=0.005, help="mean seconds between reads")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="updates per second")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a short run (not saved)")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args()
    if args.quick:
        args.reads, args.updates, args.runs, args.no_save = 50, 40, 1, True
    calibration = calibrate()
    result = asyncio.run(bench(args))
    settings = {
        name: getattr(args, name)
        for name in ("caches", "items", "reads", "zipf", "pause", "updates", "rate", "runs")
    }
    full = {**result, "settings": settings, "machine": describe(), "calibration": calibration}
    write_results(full, None if args.no_save else args.out)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))


if __name__ == "__main__":
    main()
