"""kill -9 the publisher, restart it from its checkpoint: a relay sees every seq once, in order,
and ends with exactly the publisher's state (issue 3, item 7).

The relay here is a model one written against the protocol (so the test observes every batch it
is sent); it reconnects with ``Hello.resume`` as a real relay does. Beside it a real relay takes
live writes while the publisher is killed (issue 40, item 5): the write the publisher had made
durable stays shown and is confirmed after the restart, once in the confirmed stream; the one in
flight is withdrawn, its writer told ``unavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from websockets.asyncio import client as websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from fanout.client import LiveView, Subscriber, SubscriptionError, connect
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    DatasetState,
    Hello,
    Welcome,
)

pytestmark = pytest.mark.integration

REGION = Box((0, 0), (500, 500))
CONFIG = """
[datasets.agents]
source = { kind = "simulation", agents = 2000 }

[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"
"""


@pytest_asyncio.fixture
async def children() -> AsyncIterator[Children]:
    """The test's processes (its loop is the test's own, not the module's)."""
    async with Children() as scope:
        yield scope


class ModelRelay:
    """Holds one primitive; applies batches to a dict; records every seq it receives."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[float, float]] = {}
        self.seqs: list[int] = []
        self.epoch = -1
        self.tick = -1

    async def follow(self, url: str, until: int) -> None:
        """Connect (resuming if it has seen batches) and apply batches until seq ``until``."""
        resume = {"agents": (self.epoch, self.seqs[-1])} if self.seqs else {}
        async with websockets.connect(url, max_size=None) as websocket:
            await websocket.send(
                codec.encode(Hello(PROTOCOL_VERSION, "relay", "model", resume=resume))
            )
            assert isinstance(await self._frame(websocket), Welcome)
            assert isinstance(await self._frame(websocket), Catalog)
            await websocket.send(codec.encode(Acquire(1, "agents", REGION)))
            while not self.seqs or self.seqs[-1] < until:
                frame = await self._frame(websocket)
                if isinstance(frame, DatasetState):  # its query restarting (a loaded machine)
                    continue
                assert isinstance(frame, Batch), frame
                self._apply(frame)

    async def _frame(self, websocket: ClientConnection) -> object:
        return codec.from_publisher().decode(await asyncio.wait_for(websocket.recv(), 120))

    def _apply(self, batch: Batch) -> None:
        if not self.seqs or batch.seq != self.seqs[-1]:  # else a re-send: its snapshots are new
            self.seqs.append(batch.seq)
        self.epoch, self.tick = batch.epoch, batch.tick
        if 1 in batch.snapshots:
            self.rows = {k: p for k, p in self.rows.items() if not REGION.match([p[0]], [p[1]])[0]}
        upserts = decode_columns(batch.upserts)
        if batch.upserts.length:
            for key, x, y in zip(
                upserts["id"].tolist(), upserts["x"].tolist(), upserts["y"].tolist(), strict=True
            ):
                self.rows[key] = (x, y)
        for key in decode_columns(batch.deletes).get("id", np.empty(0)).tolist():
            self.rows.pop(key, None)

    def inside(self) -> dict[int, tuple[float, float]]:
        return {k: p for k, p in self.rows.items() if REGION.match([p[0]], [p[1]])[0]}


async def publisher(children: Children, state: Path, log: Path, port: int = 0) -> Child:
    config = state.parent / "fanout.toml"
    config.write_text(CONFIG)
    args = ["--config", str(config), "--port", str(port), "--state-dir", str(state)]
    return await children.start("publisher", [*args, "--log-level", "info"], log)


class Watchers:
    """Three views of ``live/#`` on a real relay: ``latest`` with live writes (``shown``),
    ``latest`` confirmed only, and ``every``, whose changes' topics are recorded in order
    (``stream``: the confirmed stream)."""

    def __init__(self) -> None:
        self.stream: list[str] = []

    async def subscribe(self, subscriber: Subscriber) -> None:
        live = topic("live/#")
        self.shown = await subscriber.subscribe(live, dataset="sensors", rate=100.0)
        self.confirmed = await subscriber.subscribe(live, dataset="sensors", confirmed=True)
        self.every: LiveView = await subscriber.subscribe(live, dataset="sensors", mode="every")

    async def record(self) -> None:
        async for update in self.every:
            if update.full:  # the view as it is (the first push), not a change
                continue
            for rows in (update.entered, update.updated):
                self.stream += rows["topic"].tolist() if rows else []


async def write(writer: Subscriber, name: str) -> tuple[int, int]:
    return await writer.publish("sensors", [{"topic": name, "value": 1.0}])


async def refused(writer: Subscriber, name: str) -> SubscriptionError:
    """The refusal of a write expected to be refused."""
    with pytest.raises(SubscriptionError) as refusal:
        await write(writer, name)
    return refusal.value


async def test_kill_9_and_restart_loses_and_repeats_nothing(
    children: Children, tmp_path: Path
) -> None:
    first = await publisher(children, tmp_path / "state", tmp_path / "publisher-1.log")
    url = first.url
    # One process (``--workers 1``): this test is of the publisher killed and restarted; across
    # workers a write is shown at once too (tests/relay/shell/test_workers_live.py).
    args = ["--publisher", url, "--port", "0", "--log-level", "info", "--workers", "1"]
    relay = await children.start("relay", args, tmp_path / "relay.log")
    model, watchers = ModelRelay(), Watchers()
    async with (
        connect(relay.url) as subscriber,
        connect(relay.url) as writer,
        asyncio.TaskGroup() as tasks,
    ):
        await watchers.subscribe(subscriber)
        recording = tasks.create_task(watchers.record())
        try:
            await model.follow(url, until=6)
            await write(writer, "live/1")  # accepted: durable in the publisher's ingest log
            await first.pause()  # ... the next write in flight when it is killed
            assert "live/1" not in watchers.confirmed.rows, "confirmed already: nothing tested"
            unanswered = tasks.create_task(refused(writer, "live/2"))
            await eventually(lambda: "live/2" in watchers.shown.rows, what="live/2 shown")
        finally:
            first.kill()
            await first.process.wait()
        assert (await unanswered).code == "unavailable"
        await eventually(
            lambda: set(watchers.shown.rows) == {"live/1"}, what="the unanswered write withdrawn"
        )
        await restarted(children, tmp_path, model, url)

        # The restarted publisher's micro-batch confirms the accepted write; writes flow again.
        await eventually(lambda: "live/1" in watchers.confirmed.rows, timeout=60)
        await write(writer, "live/3")
        await eventually(lambda: len(watchers.stream) >= 2, timeout=30, what="live/3 confirmed")
        counts = scrape(relay.url)
        recording.cancel()
    assert watchers.stream == ["live/1", "live/3"], "the confirmed stream: each write once"
    assert set(watchers.shown.rows) == set(watchers.confirmed.rows) == {"live/1", "live/3"}
    assert counts["fanout_relay_live_withdrawn_total"] == 1
    assert counts["fanout_relay_live_pending"] == 0


async def restarted(children: Children, tmp_path: Path, relay: ModelRelay, url: str) -> None:
    """The publisher restarted on its port from its state: ``relay`` (which followed the
    killed one) sees every seq once, in order, and ends with the publisher's state (the
    scope stops it)."""
    before = len(relay.seqs)
    log = tmp_path / "publisher-2.log"
    await publisher(children, tmp_path / "state", log, port=int(url.rsplit(":", 1)[1]))
    # let the restarted publisher deliver micro-batches the relay misses: they come from the log
    await eventually(
        lambda: log.read_text().count("fanout.publisher.pipeline: agents batch") >= 2,
        timeout=120,
        in_thread=True,
    )
    with contextlib.suppress(ConnectionClosed):
        await relay.follow(url, until=relay.seqs[-1] + 5)
    assert len(relay.seqs) > before
    assert "replayed" in log.read_text()
    assert relay.seqs == list(range(relay.seqs[0], relay.seqs[-1] + 1)), relay.seqs
    async with open_reader(url) as reader:
        _, state = await reader.read("agents", REGION, relay.tick)
    expected = dict(
        zip(
            state["id"].tolist(),
            zip(state["x"].tolist(), state["y"].tolist(), strict=True),
            strict=True,
        )
    )
    assert relay.inside() == expected
