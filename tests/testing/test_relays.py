"""Real relays on loopback (testing/relays.py), fed by the scripted publisher, serving the client
library."""

from __future__ import annotations

import asyncio
import operator
import socket
from pathlib import Path

import pytest

from fanout.client import connect
from fanout.relay.config import Limits, Listening, Planning, RelayConfig, Upstream
from fanout.relay.core.planner import Policy
from fanout.testing.cpu import CpuSample
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import RelayProcess, running_relay
from fanout.views import Box
from fanout.wire.messages import Catalog, DatasetInfo

#: Relays acquire exactly what their subscribers view: one primitive a view, its snapshot sent.
EXACT = Policy(widen="exact")
AGENTS = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])


async def subscribe_and_feed(publisher: ScriptedPublisher, relay_url: str) -> dict:
    """Subscribe to a box through the relay; answer its acquire with one row; the view's rows."""
    async with connect(relay_url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire(10)
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
        await asyncio.wait_for(view.wait_updates(1), 10)
        return view.rows


async def test_a_relay_in_this_event_loop_serves_until_the_block_ends() -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with serving(publisher) as url:
        async with running_relay(
            url, planning=Planning(EXACT), limits=Limits(stall_timeout=1.0), name="here"
        ) as (
            relay,
            relay_url,
        ):
            assert relay_url == f"ws://{LOOPBACK}:{relay.port}"
            assert relay.config.name == "here" and relay.config.limits.stall_timeout == 1.0
            assert await subscribe_and_feed(publisher, relay_url) == {
                1: {"id": 1, "x": 1.0, "y": 1.0}
            }
        with pytest.raises(OSError):
            socket.create_connection((LOOPBACK, relay.port), timeout=1).close()


async def test_a_relay_that_cannot_reach_its_publisher_is_not_ready() -> None:
    nobody = f"ws://{LOOPBACK}:{free_port()}"
    with pytest.raises(TimeoutError, match=r"not ready within 0\.5 s"):
        async with running_relay(nobody, timeout=0.5):
            pass


async def test_a_relay_that_fails_to_start_raises_why_as_it_was() -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        async with serving(publisher) as url:
            in_use = Listening(host=LOOPBACK, port=taken.getsockname()[1])
            with pytest.raises(OSError):  # the relay's own error, not an ExceptionGroup of it
                async with running_relay(url, listening=in_use):
                    pass
            this = asyncio.current_task()
            assert this is not None and this.cancelling() == 0  # the test's task left as it was


async def test_a_relay_in_its_own_process_is_sampled_and_stopped(tmp_path: Path) -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    profile = tmp_path / "relay.prof"
    async with serving(publisher) as url:
        relay = RelayProcess(
            RelayConfig(Upstream(url), name="apart", planning=Planning(EXACT)),
            log=tmp_path / "relay.log",
            instrument=operator.attrgetter("core.stats"),  # a report: the counters again
            profile=profile,
        )
        try:
            relay_url = await asyncio.to_thread(relay.ready)
            assert relay_url.startswith(f"ws://{LOOPBACK}:")
            before = await asyncio.to_thread(relay.sample)
            assert await subscribe_and_feed(publisher, relay_url) == {
                1: {"id": 1, "x": 1.0, "y": 1.0}
            }
            after = await asyncio.to_thread(relay.sample)
        finally:
            await asyncio.to_thread(relay.stop)
    assert isinstance(after.cpu, CpuSample) and after.cpu.seconds >= before.cpu.seconds > 0
    assert after.cpu.at > before.cpu.at
    assert after.stats["pushes"] - before.stats["pushes"] == 1
    assert set(after.report) == set(after.stats)
    assert relay.process.exitcode == 0
    assert profile.stat().st_size > 0  # the profile was written as the process ended


async def test_a_relay_process_that_fails_to_start_says_why() -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        async with serving(publisher) as url:
            relay = RelayProcess(
                RelayConfig(Upstream(url), listening=Listening(port=taken.getsockname()[1]))
            )
            try:
                with pytest.raises(RuntimeError, match=r"the relay process failed: .*Error"):
                    await asyncio.to_thread(relay.ready)
            finally:
                await asyncio.to_thread(relay.stop)
