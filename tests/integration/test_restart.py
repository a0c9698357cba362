"""kill -9 the publisher, restart it from its checkpoint: a relay sees every seq once, in order,
and ends with exactly the publisher's state (issue 3, item 7).

The relay here is a model one written against the protocol (so the test observes every batch it
is sent); it reconnects with ``Hello.resume`` as a real relay does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import PROTOCOL_VERSION, Acquire, Batch, Catalog, Hello, Welcome

pytestmark = pytest.mark.integration

REGION = Box((0, 0), (500, 500))


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
        async with connect(url, max_size=None) as websocket:
            await websocket.send(
                codec.encode(Hello(PROTOCOL_VERSION, "relay", "model", resume=resume))
            )
            assert isinstance(await self._frame(websocket), Welcome)
            assert isinstance(await self._frame(websocket), Catalog)
            await websocket.send(codec.encode(Acquire(1, "agents", REGION)))
            while not self.seqs or self.seqs[-1] < until:
                frame = await self._frame(websocket)
                assert isinstance(frame, Batch), frame
                self._apply(frame)

    async def _frame(self, websocket: ClientConnection) -> object:
        return codec.from_publisher().decode(await asyncio.wait_for(websocket.recv(), 120))

    def _apply(self, batch: Batch) -> None:
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
    args = [
        "--port",
        str(port),
        "--state-dir",
        str(state),
        "--agents",
        "2000",
        "--log-level",
        "info",
    ]
    return await children.start("publisher", args, log)


async def test_kill_9_and_restart_loses_and_repeats_nothing(
    children: Children, tmp_path: Path
) -> None:
    first = await publisher(children, tmp_path / "state", tmp_path / "publisher-1.log")
    url = first.url
    relay = ModelRelay()
    try:
        await relay.follow(url, until=6)
    finally:
        first.kill()
        await first.process.wait()
    before = len(relay.seqs)
    log = tmp_path / "publisher-2.log"
    second = await publisher(children, tmp_path / "state", log, port=int(url.rsplit(":", 1)[1]))
    try:
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
    finally:
        await second.stop()
