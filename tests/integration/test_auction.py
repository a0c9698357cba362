"""The auction of Liebig et al. (section 5), end to end: items and bids in a real PostgreSQL, a
real nats-server, the Spark publisher as the database connector, four bidder processes each with
a snoopy cache (``examples/auction/bidder.py``) bidding concurrently, and a watcher following a
category by label (``examples/auction/watcher.py``); nats-server is killed and restarted while
they bid. After the auction closes, every cache
equals the database, and no bidder ever read an older version of an item after a newer one or a
high bid nobody bid."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio

from fanout.launch import Child, Children
from fanout.testing.nats import NatsServer, throwaway_nats
from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

AUCTION = Path(__file__).resolve().parents[2] / "examples" / "auction"
ITEMS = 16
BIDDERS = ("ada", "bob", "cy", "dee")
COLUMNS = ("id", "title", "category", "high_bid", "high_bidder", "closed")


def run_items(*args: str) -> None:
    """The example's own set-up, run as its documentation runs it (docs/caches.md)."""
    subprocess.run([sys.executable, str(AUCTION / "items.py"), *args], check=True, timeout=120)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    need("initdb", "pg_ctl")
    with throwaway_postgres() as url:
        run_items("--db", url, "--items", str(ITEMS))
        yield url


@pytest.fixture(scope="module")
def bus() -> Iterator[NatsServer]:
    need("nats-server")
    with throwaway_nats() as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(
    children: Children, tmp_path: Path, database: str, bus: NatsServer
) -> AsyncIterator[Child]:
    config = tmp_path / "fanout.toml"
    text = (AUCTION / "fanout.toml").read_text().replace("DSN", database)
    config.write_text(text.replace("nats://127.0.0.1:4222", bus.url))
    child = await children.start(
        "publisher",
        [
            "--config",
            str(config),
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "state"),
            "--log-level",
            "info",
        ],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def spawn(script: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(AUCTION / script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def line(process: asyncio.subprocess.Process, starts: str, timeout: float = 240) -> str:
    """The first line of its output that starts with ``starts``."""
    assert process.stdout is not None
    async with asyncio.timeout(timeout):
        while True:
            text = (await process.stdout.readline()).decode()
            if not text:
                _, err = await process.communicate()
                raise AssertionError(f"{process.pid} ended without {starts!r}: {err.decode()}")
            if text.startswith(starts):
                return text


def database_items(url: str) -> dict[int, dict[str, object]]:
    with psycopg.connect(url) as db:
        rows = db.execute(f"SELECT {', '.join(COLUMNS)} FROM items ORDER BY id").fetchall()
    return {row[0]: dict(zip(COLUMNS, row, strict=True)) for row in rows}


async def test_every_cache_converges_to_the_database_with_no_stale_reads(
    publisher: Child, database: str, bus: NatsServer
) -> None:
    common = ["--nats", bus.url, "--domain", "auction"]
    watcher = await spawn(
        "watcher.py",
        *common,
        "--label",
        "computer.hardware.>",
        "--until-closed",
        "--timeout",
        "300",
    )
    await line(watcher, "following")
    bidders = [
        await spawn(
            "bidder.py",
            *common,
            "--db",
            database,
            "--name",
            name,
            "--items",
            str(ITEMS),
            "--bids",
            "12",
            "--pause",
            "0.3",
            "--seed",
            str(seed),
            "--timeout",
            "240",
        )
        for seed, name in enumerate(BIDDERS)
    ]
    # Mid-auction the bus goes away and comes back: what the caches missed they load again.
    await asyncio.sleep(3)
    await asyncio.to_thread(bus.restart, 1.0)
    for bidder in bidders:
        await line(bidder, "bidding done")
    await asyncio.to_thread(run_items, "--db", database, "--close")
    results = [json.loads(await line(bidder, "{")) for bidder in bidders]
    codes = [await bidder.wait() for bidder in bidders]
    followed = json.loads(await line(watcher, "{"))
    await watcher.wait()
    truth = database_items(database)
    for result in results:
        assert result["stale_reads"] == [], result
        assert result["differs"] == [], result
        assert result["malformed"] == 0
        assert result["closed_items"] == 0, result  # every read found its item, open
    assert codes == [0] * len(BIDDERS)
    assert sum(result["placed"] for result in results) > 0, results
    # The caches shared their loads: together they faulted fewer items than they read.
    assert sum(r["snooped"] for r in results) > 0, results
    assert sum(r["faults"] for r in results) < sum(r["reads"] for r in results), results
    hardware = {
        str(key): row
        for key, row in truth.items()
        if str(row["category"]).startswith("computer.hardware.")
    }
    assert followed == hardware
    # the connector's counts, on the publisher's /metrics
    host_port = publisher.url.removeprefix("ws://")
    text = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://{host_port}/metrics", timeout=10).read().decode()
    )
    loads = re.search(r"^fanout_publisher_bus_loads_total (\d+)", text, re.M)
    assert loads is not None and int(loads.group(1)) > 0, text
