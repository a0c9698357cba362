"""Fuzzing a real relay over real sockets: hostile connections send mutated frames, raw bytes
and text, before and after their ``Hello``, while a well-behaved subscriber on the same relay is
served. Each hostile message gets an ``Error`` frame with a code (or, from a persistent
offender, a clean close), no traceback is logged, and the good subscriber gets its updates."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from fanout.client import connect
from fanout.relay.config import Limits, Planning
from fanout.relay.core.planner import Policy
from fanout.testing.catalog import AGENTS
from fanout.testing.hostile import HELLO, mutated
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.handshake import MAX_BAD_FRAMES
from fanout.wire.messages import Catalog, Error

TICKS = 30
HOSTILE = 6  # connections
MESSAGES = 120  # each


async def attack(url: str, seed: int, greet: bool) -> list[str]:
    """One hostile connection; returns the codes of the ``Error`` frames it was answered."""
    rng = random.Random(seed)
    codes: list[str] = []
    async with ws_connect(url, max_size=None) as websocket:
        if greet:
            await websocket.send(HELLO)
            await websocket.recv()  # Welcome
        for _ in range(MESSAGES):
            message = mutated(rng)
            try:
                await websocket.send(message)
                codes += await _answers(websocket)
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code in (1000, 1008), closed
                break
    return codes


async def _answers(websocket: ClientConnection) -> list[str]:
    """The ``Error`` codes the relay sent back by now (a valid frame may get a ``Subscribed``
    or nothing: a mutation can leave a frame valid)."""
    codes: list[str] = []
    while True:
        try:
            data = await asyncio.wait_for(websocket.recv(), 0.05)
        except TimeoutError:
            return codes
        frame = codec.to_subscriber().decode(data)
        if isinstance(frame, Error):
            assert frame.code, frame
            codes.append(frame.code)


@pytest.fixture
async def relay() -> AsyncIterator[tuple[ScriptedPublisher, str]]:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with (
        serving(publisher) as url,
        running_relay(
            url, planning=Planning(Policy(widen="margin")), limits=Limits(stall_timeout=5.0)
        ) as (_, relay_url),
    ):
        yield publisher, relay_url


async def test_hostile_connections_get_errors_and_the_good_subscriber_is_served(
    relay: tuple[ScriptedPublisher, str], caplog: pytest.LogCaptureFixture
) -> None:
    publisher, url = relay
    caplog.set_level(logging.INFO)
    async with connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)), rate=1000.0)
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
        ticks: list[int] = []

        async def follow() -> None:
            async for update in view:
                ticks.append(update.tick)

        following = asyncio.create_task(follow())
        attacks = [
            asyncio.create_task(attack(url, seed, greet=seed % 3 != 0)) for seed in range(HOSTILE)
        ]
        for tick in range(1, TICKS + 1):
            await publisher.send({"id": [1], "x": [1.0 + tick / 100], "y": [1.0]}, tick=tick)
            await asyncio.sleep(0.05)
        answered = await asyncio.gather(*attacks)
        await asyncio.sleep(0.3)
        following.cancel()
    greeted = [codes for seed, codes in enumerate(answered) if seed % 3 != 0]
    assert all(codes for codes in greeted), answered  # every greeted attacker was answered
    assert {code for codes in answered for code in codes} <= {
        "protocol",
        "handshake",
        "invalid_view",
        "invalid_transform",
        "bad_request",
        "unknown_subscription",
    }
    assert max(len(codes) for codes in greeted) <= MESSAGES
    assert sum(1 for t in range(1, TICKS + 1) if t in ticks) >= 0.9 * TICKS, ticks
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
    assert MAX_BAD_FRAMES > 1
