"""Fuzzing the publisher's port over real sockets: hostile connections in every role (a relay,
a reader, a producer, and none: no ``Hello``) send mutated frames, raw bytes and text, while a
well-behaved relay keeps getting its batches.

The control plane, its sessions, the registry and the sockets are the real ones; the datasets
behind them are a small in-memory stand-in (no Spark: what is fuzzed is the port). Every hostile
message gets an ``Error`` frame with a code or a clean close; no traceback is logged; the good
relay gets every batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa
import pytest
from websockets.asyncio.client import connect

from fanout.errors import BadRequest, InvalidView
from fanout.metrics import Sample
from fanout.publisher import control as control_module
from fanout.publisher.control import ControlPlane
from fanout.publisher.relaytable import Registry
from fanout.testing.batches import batch
from fanout.testing.catalog import AGENTS
from fanout.testing.hostile import Tally, fuzz
from fanout.views import Box, View
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Batch,
    Catalog,
    DatasetInfo,
    Hello,
    Knowledge,
    Welcome,
)

BATCHES = 30
HOSTILE = 8  # connections at once, two of each role
FRAMES = 150  # each


class Datasets:
    """One dataset of boxes; answers reads, publishes and log requests plainly."""

    def infos(self) -> list[DatasetInfo]:
        return [AGENTS]

    def check(self, name: str, view: View) -> View:
        if name != "agents":
            raise InvalidView(f"unknown dataset {name!r}")
        if not isinstance(view, Box):
            raise InvalidView("boxes only here")
        return view

    def samples(self) -> list[Sample]:
        return []

    def publish(
        self, name: str, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> tuple[int, int]:
        self.check(name, Box((0, 0), (1, 1)))
        return 0, 0

    def read(self, name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        self.check(name, view)
        if tick > 100:
            raise BadRequest(f"tick {tick} is not where a micro-batch ended")
        return tick, pa.table({"id": [1], "x": [0.5], "y": [0.5]})

    def knowledge(self, name: str, epoch: int, req: int, first: int, last: int) -> list[Knowledge]:
        self.check(name, Box((0, 0), (1, 1)))
        if last - first > 100:
            raise BadRequest("at most 100 seqs at once")
        empty = encode_columns({})
        return [
            Knowledge(req, name, epoch, seq, seq, 0.0, empty, empty)
            for seq in range(first, last + 1)
        ]

    def replay(self, name: str, epoch: int, after: int) -> list[Batch]:
        raise BadRequest(f"epoch {epoch} is over")


@pytest.fixture
async def plane() -> AsyncIterator[tuple[ControlPlane, str]]:
    control = ControlPlane(Datasets(), Registry())
    ready = asyncio.Event()
    task = asyncio.create_task(control.serve("127.0.0.1", 0, ready=lambda _: ready.set()))
    await ready.wait()
    try:
        yield control, f"ws://127.0.0.1:{control.port}"
    finally:
        control.stop()
        await task


def greeting(role: str) -> bytes:
    return codec.encode(Hello(PROTOCOL_VERSION, role, name="fuzz"))  # type: ignore[arg-type]


async def test_hostile_peers_in_every_role_get_errors_and_a_good_relay_gets_every_batch(
    plane: tuple[ControlPlane, str], caplog: pytest.LogCaptureFixture
) -> None:
    control, url = plane
    caplog.set_level(logging.INFO)
    async with connect(url) as relay:
        await relay.send(greeting("relay"))
        assert isinstance(codec.from_publisher().decode(await relay.recv()), Welcome)
        assert isinstance(codec.from_publisher().decode(await relay.recv()), Catalog)
        number = max(control._relays)
        tally = Tally()
        roles: list[bool | bytes] = [
            greeting("relay"),
            greeting("reader"),
            greeting("producer"),
            False,
        ]
        attacks = [
            asyncio.create_task(fuzz(url, seed, FRAMES, roles[seed % 4], tally))
            for seed in range(HOSTILE)
        ]
        received: list[int] = []
        for seq in range(1, BATCHES + 1):
            control.deliver({number: batch(seq)})
            await asyncio.sleep(0.02)
        await asyncio.gather(*attacks)
        while len(received) < BATCHES:
            frame = codec.from_publisher().decode(await asyncio.wait_for(relay.recv(), 10))
            if isinstance(frame, Batch):
                received.append(frame.seq)
    assert received == list(range(1, BATCHES + 1))
    assert tally.frames == HOSTILE * FRAMES
    assert tally.violation_count == 0, tally.violations
    assert set(tally.closes) <= {1000, 1008}, tally.closes
    assert tally.errors["protocol"] > 0, tally.errors
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


async def test_connections_that_sent_bad_input_share_a_small_budget_of_loop_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each suspect frame charged 1 ms at least, 10 ms a second for all suspects: 40 bad frames,
    # sent far faster than ten a second, overdraw the budget and must wait for it (a few
    # seconds in all), and the good relay, which never sent one, keeps getting its batches.
    monkeypatch.setattr(control_module, "SUSPECT_FRAME_COST", 0.001)
    monkeypatch.setattr(control_module, "SUSPECT_SHARE", 0.01)
    monkeypatch.setattr(control_module, "SUSPECT_BURST", 0.01)
    control = ControlPlane(Datasets(), Registry())
    ready = asyncio.Event()
    serving = asyncio.create_task(control.serve("127.0.0.1", 0, ready=lambda _: ready.set()))
    await ready.wait()
    url = f"ws://127.0.0.1:{control.port}"
    try:
        async with connect(url) as relay:
            await relay.send(greeting("relay"))
            await relay.recv(), await relay.recv()  # Welcome, Catalog
            number = max(control._relays)
            tally = Tally()
            attack = asyncio.create_task(fuzz(url, 7, 40, greeting("producer"), tally))
            for seq in range(1, 11):
                control.deliver({number: batch(seq)})
                frame = codec.from_publisher().decode(await asyncio.wait_for(relay.recv(), 2))
                assert isinstance(frame, Batch) and frame.seq == seq
                await asyncio.sleep(0.05)
            await asyncio.wait_for(attack, 60)
    finally:
        control.stop()
        await serving
    delayed = [s.value for s in control.samples() if s.name == "publisher_suspect_reads_delayed"]
    assert delayed[0] > 0, delayed


async def test_every_frame_read_is_counted_well_formed_or_not() -> None:
    control = ControlPlane(Datasets(), Registry())
    ready = asyncio.Event()
    serving = asyncio.create_task(control.serve("127.0.0.1", 0, ready=lambda _: ready.set()))
    await ready.wait()
    try:
        async with connect(f"ws://127.0.0.1:{control.port}") as reader:
            await reader.send(greeting("reader"))
            await reader.recv()  # Welcome
            for _ in range(5):
                await reader.send(b"\xc1not msgpack")
                await asyncio.wait_for(reader.recv(), 10)  # its Error
    finally:
        control.stop()
        await serving
    received = [s.value for s in control.samples() if s.name == "publisher_frames_received"]
    assert received == [6]
