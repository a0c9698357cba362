"""A crowd against one relay: 1,000 idle connections and 1,000 misbehaving ones, while a
well-behaved subscriber is served.

The relay runs in a process of its own (``fanout.testing.relays.RelayProcess``) and so does the
crowd (``fanout.testing.hostile.HostileProcess``, at niceness 19: on this machine its own CPU
would otherwise be taken from the relay, which a crowd's on machines of its own is not); the
scripted publisher and the subscriber run
here, on an event loop of their own. Idle: half connect and never say ``Hello``, half say it and
then nothing. Misbehaving, a quarter each: bad frames in a row (answered with ``Error`` frames,
then closed), a frame over the size limit (closed with 1009), a flood of view changes (read at
the connection's rate), and a flood of subscriptions past the connection's limit (refused with
``bad_request``). The subscriber keeps >= 90% of its updates, the relay answers ``/healthz``
all along, and ``/metrics`` counts what it refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import urllib.request
from collections.abc import AsyncIterator

import pytest

from fanout.client import LiveView, connect
from fanout.metrics import scrape
from fanout.relay.config import Limits, Planning, RelayConfig, Upstream
from fanout.relay.core.planner import Policy
from fanout.testing.catalog import AGENTS
from fanout.testing.hostile import CrowdPlan, HostileProcess
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import RelayProcess
from fanout.views import Box
from fanout.wire.messages import Catalog

IDLE = 1_000
MISBEHAVING = 1_000
TICKS = 40
#: Seconds between ticks. A push later than this is coalesced with the next tick's and the tick
#: counts as lost, so the interval is what a busy 2-core machine's scheduling may delay a
#: push by without the relay being at fault (at 0.1 s, a load average of 7 was enough).
TICK_INTERVAL = 0.25
#: Sockets this test's processes hold: both ends of every connection are on this machine.
SOCKETS = 2 * (IDLE + MISBEHAVING) + 200


def enough_files() -> None:
    """Raise the open-file limit (children inherit it) to hold every socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= SOCKETS:
        return
    if hard != resource.RLIM_INFINITY and hard < SOCKETS:
        with contextlib.suppress(ValueError, OSError):  # only root may raise the hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (SOCKETS, SOCKETS))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SOCKETS:
        pytest.fail(f"this test needs {SOCKETS} open files; the limit is {hard} (ulimit -n)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOCKETS, hard))


@contextlib.asynccontextmanager
async def relay_process() -> AsyncIterator[tuple[ScriptedPublisher, str]]:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with serving(publisher) as url:
        config = RelayConfig(
            Upstream(url),
            planning=Planning(Policy(widen="margin")),
            limits=Limits(
                max_subscriptions=5,
                read_rate=10.0,
                read_burst=5,
                hello_timeout=120.0,  # the idle ones stay for the whole test
            ),
        )
        relay = RelayProcess(config)
        try:
            yield publisher, await asyncio.to_thread(relay.ready)
        finally:
            await asyncio.to_thread(relay.stop)


def healthy(url: str) -> int:
    http = url.replace("ws://", "http://") + "/healthz"
    with urllib.request.urlopen(http, timeout=10) as response:
        return int(response.status)


async def ticks_received(publisher: ScriptedPublisher, view: LiveView, url: str, first: int) -> int:
    """Send ``TICKS`` ticks from ``first``, one per ``TICK_INTERVAL``; how many reached
    ``view`` (ticks coalesced into a later push, because the relay was late, do not count)."""
    ticks: list[int] = []

    async def follow() -> None:
        async for update in view:
            ticks.append(update.tick)

    following = asyncio.create_task(follow())
    for tick in range(first + 1, first + TICKS + 1):
        await publisher.send({"id": [1], "x": [1.0 + tick / 1e5], "y": [1.0]}, tick=tick)
        await asyncio.sleep(TICK_INTERVAL)
        if tick % 10 == 0:
            assert await asyncio.to_thread(healthy, url) == 200
    await asyncio.sleep(0.3)
    following.cancel()
    return sum(1 for tick in range(first + 1, first + TICKS + 1) if tick in ticks)


@pytest.mark.integration  # a relay and a crowd in processes of their own, timed by the ticks
async def test_a_thousand_idle_and_a_thousand_misbehaving_connections_leave_one_served() -> None:
    enough_files()
    async with relay_process() as (publisher, url), connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)), rate=1000.0)
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
        await asyncio.wait_for(view.__aiter__().__anext__(), 30)
        alone = await ticks_received(publisher, view, url, 1000)
        crowd = HostileProcess(
            CrowdPlan(url, IDLE, MISBEHAVING, seconds=TICKS * TICK_INTERVAL + 1), nice=19
        )
        try:
            connected = await asyncio.to_thread(crowd.connected)
            assert connected >= 0.99 * (IDLE + MISBEHAVING), connected
            crowded = await ticks_received(publisher, view, url, 2000)
            metrics = await asyncio.to_thread(scrape, url)
            tally = await asyncio.to_thread(crowd.done)
        finally:
            crowd.stop()
    assert crowded >= 0.9 * alone, (crowded, alone)
    assert tally.violation_count == 0, tally.violations
    assert metrics["fanout_relay_connections_ungreeted"] >= 0.45 * IDLE
    assert metrics["fanout_relay_frames_refused_total"] > 0
    assert metrics["fanout_relay_connections_closed_bad_input_total"] > 0
    assert metrics["fanout_relay_reads_throttled_total"] > 0
    # Bad frames in a row (1008) and oversize frames (1009) end their connections.
    assert tally.closes[1008] >= 0.9 * MISBEHAVING / 4, tally.closes
    assert tally.closes[1009] >= 0.9 * MISBEHAVING / 4, tally.closes
    assert tally.errors["bad_request"] > 0 and tally.errors["protocol"] > 0, tally.errors
