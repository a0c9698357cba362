"""A relay below a relay, over real sockets: scripted publisher -> mid relay -> edge relay ->
subscribers (``tiers``). The publisher is ``fanout.testing.publisher.ScriptedPublisher``
(no Spark); both relays and the subscribers are the real ones."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np
from websockets.asyncio.client import connect as ws_connect

from fanout.client import connect
from fanout.metrics import scrape
from fanout.relay.config import Listening, Planning, Upstream
from fanout.relay.core.planner import Policy
from fanout.relay.shell.server import RelayServer
from fanout.testing.catalog import AGENTS
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import Catalog, Error, Hello

MARGIN = Planning(Policy(widen="margin"))


def quick(url: str) -> Upstream:
    """Upstream at ``url``, reconnecting soon after it is lost."""
    return Upstream(url, reconnect_delay=0.05)


@contextlib.asynccontextmanager
async def tiers() -> AsyncIterator[tuple[ScriptedPublisher, RelayServer, RelayServer, str]]:
    """A scripted publisher, a mid relay on it, an edge relay on the mid; yields them and the
    edge's URL."""
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with (
        serving(publisher) as url,
        running_relay(
            quick(url), name="mid", listening=Listening(serve_relays=True), planning=MARGIN
        ) as (mid, mid_url),
        running_relay(quick(mid_url), name="edge", planning=MARGIN) as (edge, edge_url),
    ):
        yield publisher, mid, edge, edge_url


def rows(n: int, seq: int) -> dict[str, np.ndarray]:
    """``n`` agents on a diagonal, moved by ``seq``."""
    ids = np.arange(n, dtype=np.int64)
    return {"id": ids, "x": (ids * 10.0 + seq) % 1000, "y": (ids * 10.0 + seq) % 1000}


async def feed(publisher: ScriptedPublisher, seq: int, n: int = 100) -> None:
    """One batch of every agent, carrying the snapshots of primitives acquired since."""
    await publisher.send(rows(n, seq), snapshots=publisher.take_fresh())


async def test_an_edge_relay_serves_its_subscriber_through_the_mid_relay() -> None:
    async with tiers() as (publisher, mid, edge, url), connect(url) as subscriber:
        box = Box((0, 0), (200, 200))
        view = await subscriber.subscribe(box)
        await publisher.next_acquire(timeout=30)  # the mid relay's, for the edge relay's primitive
        for seq in range(3):  # the mid's primitive, then the edge's snapshot, then changes
            await feed(publisher, seq)
            await eventually(lambda s=seq: mid.core.datasets["agents"].seq == s, timeout=30)
        expected = {i for i in range(100) if (i * 10 + 2) % 1000 <= 200}
        await eventually(lambda: set(view.rows) == expected, timeout=30)
        assert len(publisher.relays) == 1  # only the mid relay talks to the publisher
        assert edge.core.upstream.added >= 1 and mid.relays.snapshots >= 1
        await feed(publisher, 3)
        moved = {i: float((i * 10 + 3) % 1000) for i in range(100) if (i * 10 + 3) % 1000 <= 200}
        await eventually(lambda: {i: r["x"] for i, r in view.rows.items()} == moved, timeout=30)
        counters = await asyncio.to_thread(scrape, url.replace(str(edge.port), str(mid.port)))
        assert counters["fanout_relay_relays_below"] == 1
        assert counters["fanout_relay_below_batches_total"] >= 2
        assert counters["fanout_relay_below_snapshots_total"] >= 1


async def test_a_mid_relay_that_loses_the_publisher_drops_its_edges_which_come_back() -> None:
    async with tiers() as (publisher, mid, edge, url), connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (200, 200)))
        await publisher.next_acquire(timeout=30)
        for seq in range(3):
            await feed(publisher, seq)
            await eventually(lambda s=seq: mid.core.datasets["agents"].seq == s, timeout=30)
        await eventually(lambda: len(view.rows) == 20, timeout=30)
        await publisher.relays.pop().close()  # the mid relay loses the publisher
        await eventually(lambda: edge.unready() is not None, timeout=30, what="the edge dropped")
        await eventually(lambda: mid.relays.below, timeout=30, what="the edge back at the mid")
        # The mid relay re-acquired its primitive; the edge its own, from the mid relay.
        await publisher.next_acquire(timeout=30)
        for seq in range(3, 6):
            await feed(publisher, seq)
            await eventually(lambda s=seq: mid.core.datasets["agents"].seq == s, timeout=30)
        moved = {i: float((i * 10 + 5) % 1000) for i in range(100) if (i * 10 + 5) % 1000 <= 200}
        await eventually(lambda: {i: r["x"] for i, r in view.rows.items()} == moved, timeout=30)
        assert view.error is None  # the subscriber kept its connection to the edge throughout


async def test_a_relay_serves_relays_below_only_when_told_to() -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with (
        serving(publisher) as url,
        running_relay(quick(url), planning=MARGIN) as (_, relay_url),
        ws_connect(relay_url) as websocket,
    ):
        await websocket.send(codec.encode(Hello(version=1, role="relay", name="stranger")))
        refused = codec.from_publisher().decode(await websocket.recv())
        assert isinstance(refused, Error) and refused.code == "handshake"
        assert "role 'relay' is not served here" in refused.message
