"""How the relay reads its subscribers (each connection at its rate, all of them within the
relay's control time), the process settings it takes while it runs, and limits refused at once."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import sys
from dataclasses import replace

import pytest
from tests.relay.shell.deployments import LIMITS, next_update, running
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from fanout.client import connect
from fanout.errors import ConfigError
from fanout.metrics import scrape
from fanout.relay.config import Limits, Planning, Process
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Hello, Subscribe


async def test_the_relay_shortens_the_switch_interval_while_it_runs() -> None:
    # so that the writer thread gets the GIL back soon after each numpy call (RelayConfig)
    before = sys.getswitchinterval()
    async with running(process=Process(switch_interval=0.002)):
        assert sys.getswitchinterval() == pytest.approx(0.002)
    assert sys.getswitchinterval() == pytest.approx(before)


async def test_the_relay_collects_young_garbage_less_often_while_it_runs() -> None:
    # so that short-lived objects die young instead of piling up for full collections
    before = gc.get_threshold()
    async with running(process=Process(young_collection=12_345)):
        assert gc.get_threshold() == (12_345, *before[1:])
    assert gc.get_threshold() == before


async def test_a_flooding_connection_is_read_at_its_rate_while_others_are_served() -> None:
    rate, burst = 50.0, 10  # 200 frames take 3.8 s to read: the flood lasts the test
    async with running(limits=replace(LIMITS, read_rate=rate, read_burst=burst)) as (
        publisher,
        relay,
        url,
    ):
        async with ws_connect(url) as flooder, connect(url) as calm:
            await flooder.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
            reading = asyncio.create_task(_read_all(flooder))  # its replies and pushes
            started = asyncio.get_running_loop().time()
            for sub in range(1, 201):  # 200 new subscriptions at once, each a frame
                box = Box((sub, 0), (sub + 1, 1))
                await flooder.send(codec.encode(Subscribe(sub, "agents", box)))
            await asyncio.sleep(0.3)
            read = relay.core.stats()["subscriptions"]
            elapsed = asyncio.get_running_loop().time() - started
            assert burst <= read <= rate * elapsed + burst + 1 + 5  # the burst, then the rate
            # Another connection is served meanwhile, without waiting for the flood.
            view = await asyncio.wait_for(calm.subscribe(Box((500, 500), (510, 510))), 2)
            acquire = await publisher.next_acquire()
            while acquire.view.bounds().lo[0] < 400:  # the flooder's, read before
                acquire = await publisher.next_acquire()
            await publisher.send({"id": [7], "x": [505.0], "y": [505.0]}, snapshots=[acquire.prim])
            await next_update(view)
            assert view.rows == {7: {"id": 7, "x": 505.0, "y": 505.0}}
            assert relay.core.stats()["subscriptions"] < 201  # the flood is still being read
            # every frame is read in the end, none dropped
            await eventually(lambda: relay.core.stats()["subscriptions"], lambda n: n == 201)
            assert (await asyncio.to_thread(scrape, url))["fanout_relay_reads_throttled_total"] > 0
        await reading


async def test_many_connections_together_are_read_within_the_relays_control_time() -> None:
    # Each connection far below its own read rate; together past the control time, which is
    # a tenth of a millisecond a second here: a frame or two, then every reader waits (a
    # second at most at a time).
    share = 0.0001
    async with running(limits=replace(LIMITS, control_share=share, control_burst=share)) as (
        _,
        relay,
        url,
    ):
        flooders = [await ws_connect(url) for _ in range(5)]
        for flooder in flooders:
            await flooder.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
        readers = [asyncio.create_task(_read_all(flooder)) for flooder in flooders]
        for n, flooder in enumerate(flooders):
            for sub in range(1, 5):
                box = Box((sub, n), (sub + 1, n + 1))
                await flooder.send(codec.encode(Subscribe(sub, "agents", box)))
        read = await eventually(
            lambda: relay.core.stats()["subscriptions"], lambda n: n >= 1, what="a first read"
        )
        await asyncio.sleep(0.5)
        assert relay.core.stats()["subscriptions"] < 20, read  # the others wait to be read
        assert (await asyncio.to_thread(scrape, url))["fanout_relay_reads_throttled_total"] > 0
        for flooder, reader in zip(flooders, readers, strict=True):
            reader.cancel()
            flooder.transport.abort()  # the relay is not reading them: no closing handshake


async def _read_all(websocket) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for _ in websocket:
            pass


@pytest.mark.parametrize(
    ("section", "fields", "message"),
    [
        (Limits, {"read_rate": 10.0, "read_burst": 0}, "read_burst must be >= 1 frame, not 0"),
        (Limits, {"read_rate": float("inf")}, "read_rate must be a finite number, not inf"),
        (
            Limits,
            {"read_rate": -1.0},
            "read_rate must be >= 0 frames a second (0: no limit), not -1.0",
        ),
        (Limits, {"query_timeout": 0.0}, "query_timeout must be > 0 seconds, not 0.0"),
        (Limits, {"sql_share": 0.0}, "sql_share must be in (0, 1] seconds a second, not 0.0"),
        (Limits, {"sql_share": 2.0}, "sql_share must be in (0, 1] seconds a second, not 2.0"),
        (Limits, {"sql_burst": float("nan")}, "sql_burst must be a finite number, not nan"),
        (Limits, {"max_subscriptions": 0}, "max_subscriptions must be >= 1, not 0"),
        (Limits, {"queue_limit": 0}, "queue_limit must be >= 1, not 0"),
        (Limits, {"stall_timeout": -1.0}, "stall_timeout must be > 0 seconds, not -1.0"),
        (Planning, {"pump_budget": 0.0}, "pump_budget must be > 0 seconds, not 0.0"),
    ],
)
def test_limits_that_could_not_work_are_refused_at_once(
    section: type, fields: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        section(**fields)
