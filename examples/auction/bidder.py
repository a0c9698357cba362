"""A bidder of the auction (Liebig et al., section 5), with a snoopy cache of its own.

It reads items from its cache (snooped from every other bidder's loads and from the
connector's updates, loaded only on a fault), bids a little above the high bid it reads, in a
PostgreSQL transaction that only raises the high bid (``UPDATE ... WHERE high_bid < amount``),
and checks every read: an item's version and high bid never go down in its cache, and every high
bid it read was really bid (checked against the database at the end). After its bids it prints
``bidding done``, waits until the auction is closed in its cache, compares every item in its
cache with the database, and prints one JSON line::

    python examples/auction/bidder.py --nats nats://127.0.0.1:4222 --db postgresql://... \
        --name ada --items 20 --bids 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from typing import Any

import psycopg

from fanout.cache.client import SnoopyCache
from fanout.cache.core import Change

COLUMNS = ("id", "title", "category", "high_bid", "high_bidder", "closed")


class Reads:
    """Every read and change of an item, checked as it happens (no older after newer)."""

    def __init__(self) -> None:
        self.versions: dict[int, int] = {}
        self.high: dict[int, float] = {}
        self.seen_bids: set[tuple[int, str | None, float]] = set()
        self.reads = 0
        self.stale: list[str] = []

    def check(self, key: int, version: int, row: dict[str, Any] | None, what: str) -> None:
        if version < self.versions.get(key, -1):
            self.stale.append(f"{what}: item {key} version {version} after {self.versions[key]}")
        if row is not None and row["high_bid"] < self.high.get(key, 0.0):
            self.stale.append(
                f"{what}: item {key} high bid {row['high_bid']} after {self.high[key]}"
            )
        self.versions[key] = max(version, self.versions.get(key, -1))
        if row is not None:
            self.high[key] = max(row["high_bid"], self.high.get(key, 0.0))
            if row["high_bidder"] is not None:
                self.seen_bids.add((key, row["high_bidder"], row["high_bid"]))


async def bid(cache: SnoopyCache, args: argparse.Namespace, reads: Reads) -> dict[str, int]:
    """Place ``args.bids`` bids on random items; returns what happened."""
    rng = random.Random(args.seed)
    handles = {key: cache.find_by_key("item", key) for key in range(1, args.items + 1)}
    placed = outbid = closed = 0
    for _ in range(args.bids):
        key = rng.randint(1, args.items)
        row = await handles[key].get()
        reads.reads += 1
        reads.check(key, handles[key].version, row, "read")
        if row is None or row["closed"]:
            closed += 1
            continue
        amount = round(row["high_bid"] + rng.uniform(1, 10), 2)
        async with cache.transaction() as tx:
            # Only if nobody bid higher since this cache's read (it may lag the database).
            cursor = await tx.execute(
                "UPDATE items SET high_bid = %s, high_bidder = %s"
                " WHERE id = %s AND high_bid < %s AND NOT closed",
                (amount, args.name, key, amount),
            )
            if cursor.rowcount == 1:
                await tx.execute(
                    "INSERT INTO bids (item, bidder, amount) VALUES (%s, %s, %s)",
                    (key, args.name, amount),
                )
                placed += 1
            else:
                outbid += 1
        await asyncio.sleep(rng.uniform(0, args.pause))
    return {"placed": placed, "outbid": outbid, "closed_items": closed}


async def converge(cache: SnoopyCache, args: argparse.Namespace, reads: Reads) -> list[str]:
    """Wait until the auction is closed in the cache; return how it differs from the database."""
    handles = {key: cache.find_by_key("item", key) for key in range(1, args.items + 1)}
    deadline = time.monotonic() + args.timeout
    while True:
        rows = {}
        for key, handle in handles.items():
            rows[key] = await handle.get()
            # At once: the next get may wait, and the cache may take newer versions meanwhile.
            reads.check(key, handle.version, rows[key], "final read")
        if all(row is not None and row["closed"] for row in rows.values()):
            break
        if time.monotonic() > deadline:
            return [f"the auction is not closed in this cache after {args.timeout:g} s"]
        await asyncio.sleep(0.2)
    async with await psycopg.AsyncConnection.connect(args.db) as db:
        cursor = await db.execute(f"SELECT {', '.join(COLUMNS)} FROM items ORDER BY id")
        truth = {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in await cursor.fetchall()}
        cursor = await db.execute("SELECT item, bidder, amount FROM bids")
        bids = {tuple(row) for row in await cursor.fetchall()}
    differs = [
        f"item {k}: cache {rows.get(k)} database {truth[k]}"
        for k in truth
        if rows.get(k) != truth[k]
    ]
    invented = sorted(reads.seen_bids - bids)
    return differs + [f"a high bid read that nobody bid: {bid}" for bid in invented[:5]]


async def main(args: argparse.Namespace) -> int:
    async with await SnoopyCache.connect(
        args.nats, args.domain, db=args.db, name=args.name
    ) as cache:
        reads = Reads()
        cache.on_change(
            lambda change: _check_change(change, reads) if change.ref[0] == "item" else None
        )
        done = await bid(cache, args, reads)
        print("bidding done", flush=True)
        differs = await converge(cache, args, reads)
        counters = cache.counters
        result = {
            "bidder": args.name,
            **done,
            "reads": reads.reads,
            "stale_reads": reads.stale[:10],
            "differs": differs[:10],
            "hits": counters.hits,
            "faults": counters.faults,
            "snooped": counters.snooped,
            "malformed": counters.malformed,
            "loads_sent": cache.shell.loads_sent,
            "refetches": cache.shell.refetches,
        }
        print(json.dumps(result), flush=True)
        return 0 if not reads.stale and not differs else 1


def _check_change(change: Change, reads: Reads) -> None:
    key = change.ref[1]
    assert isinstance(key, int)
    reads.check(key, change.version, change.row, f"{change.kind} snooped")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--domain", default="auction")
    parser.add_argument(
        "--load-wait", type=float, default=180.0, help="seconds to wait for the publisher at most"
    )
    parser.add_argument("--db", required=True, help="postgresql://user@host:port/db")
    parser.add_argument("--name", required=True, help="the bidder's name")
    parser.add_argument("--items", type=int, default=20, help="items 1..N are on sale")
    parser.add_argument("--bids", type=int, default=10, help="bids to try")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between bids, at most")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for closing")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
