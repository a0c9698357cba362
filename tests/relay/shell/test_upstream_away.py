"""A relay whose publisher is away: it keeps accepting subscribers, holds what it cannot yet
answer until the catalog comes, and says it is not ready (``GET /readyz``) meanwhile. A real
relay on loopback, with a scripted publisher that starts late."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest

from fanout.auth import AuthConfig, issue
from fanout.client import SubscriptionError, connect
from fanout.metrics import scrape
from fanout.relay.config import Limits, Planning, RelayConfig, Upstream
from fanout.relay.core.planner import Policy
from fanout.relay.shell.server import RelayServer
from fanout.testing.catalog import AGENTS
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire.messages import Catalog

SECRET = "away-secret-" + "k" * 32


@contextlib.asynccontextmanager
async def relay_alone(
    limits: Limits | None = None, auth: AuthConfig | None = None
) -> AsyncIterator[tuple[RelayServer, str, int]]:
    """A relay whose publisher port (yielded) has nobody listening yet."""
    port = free_port()
    relay = RelayServer(
        RelayConfig(
            Upstream(f"ws://{LOOPBACK}:{port}", reconnect_delay=0.05),
            limits=limits or Limits(),
            planning=Planning(Policy(widen="margin")),
            auth=auth,
        )
    )
    task = asyncio.create_task(relay.run())
    try:
        await eventually(lambda: relay.port is not None, what="the relay listens")
        yield relay, f"ws://{LOOPBACK}:{relay.port}", port
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def probe(url: str, path: str) -> tuple[int, str]:
    """(status, body) of ``GET path`` on the relay's port."""
    http = url.replace("ws://", "http://") + path
    try:
        with urllib.request.urlopen(http, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_subscribers_arriving_before_the_publisher_are_served_once_it_comes() -> None:
    async with relay_alone() as (relay, url, publisher_port):
        assert await asyncio.to_thread(probe, url, "/healthz") == (200, "ok\n")
        status, body = await asyncio.to_thread(probe, url, "/readyz")
        assert status == 503 and "not connected upstream" in body
        async with connect(url) as early, connect(url) as earlier:
            waiting = [
                asyncio.create_task(s.subscribe(Box((0, 0), (10, 10)))) for s in (early, earlier)
            ]
            await eventually(lambda: relay.core.stats()["held"] == 2, what="both held")
            assert not any(task.done() for task in waiting)
            assert (await asyncio.to_thread(scrape, url))["fanout_relay_held"] == 2
            publisher = ScriptedPublisher(Catalog([AGENTS]))
            async with serving(publisher, port=publisher_port):
                views = await asyncio.wait_for(asyncio.gather(*waiting), 10)
                acquire = await publisher.next_acquire()
                await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
                for view in views:
                    await asyncio.wait_for(view.__aiter__().__anext__(), 10)
                    assert view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}}
                assert await asyncio.to_thread(probe, url, "/readyz") == (200, "ready\n")
                assert relay.core.stats()["held"] == 0


async def test_a_held_subscription_is_narrowed_by_its_tokens_rules_once_the_catalog_comes() -> None:
    """Before the catalog the relay cannot narrow a view by a rule (it does not know the
    dataset's kind): the request is held, and admitted again when the catalog comes. It was
    taken as asked, every row of the box (a rule bypassed)."""
    ruled = issue("HS256", SECRET, ["subscriber"], rules={"agents": "box:0,0,5,10"})
    auth = AuthConfig("HS256", SECRET)
    async with relay_alone(auth=auth) as (relay, url, port), connect(url, token=ruled) as early:
        waiting = asyncio.create_task(early.subscribe(Box((0, 0), (10, 10))))
        await eventually(lambda: relay.core.stats()["held"] == 1, what="held")
        publisher = ScriptedPublisher(Catalog([AGENTS]))
        async with serving(publisher, port=port):
            view = await asyncio.wait_for(waiting, 10)
            acquire = await publisher.next_acquire()
            rows = {"id": [1, 2, 3], "x": [1.0, 6.0, 8.0], "y": [1.0, 1.0, 1.0]}
            await publisher.send(rows, snapshots=[acquire.prim])
            await asyncio.wait_for(view.__aiter__().__anext__(), 10)
            assert view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}}


async def test_a_subscription_held_longer_than_the_wait_is_refused_as_unavailable() -> None:
    async with relay_alone(Limits(catalog_wait=0.5)) as (relay, url, _), connect(url) as subscriber:
        with pytest.raises(SubscriptionError, match="not been connected upstream") as refused:
            await asyncio.wait_for(subscriber.subscribe(Box((0, 0), (1, 1))), 10)
        assert refused.value.code == "unavailable"
        assert relay.core.stats()["held_refused"] == 1


async def test_a_publisher_breaking_off_handshakes_does_not_end_the_relays_upstream_link() -> None:
    # A publisher killed or restarting while it answers closes the TCP connection during the
    # WebSocket handshake: the relay keeps trying (it used to exit), and connects once it can.
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)  # the start of the handshake, then nothing
        writer.close()

    async with relay_alone() as (_, url, publisher_port):
        breaking = await asyncio.start_server(hang_up, LOOPBACK, publisher_port)
        async with breaking:
            await asyncio.sleep(0.5)  # several attempts, each broken off
        breaking.close()
        await breaking.wait_closed()
        assert await asyncio.to_thread(probe, url, "/healthz") == (200, "ok\n")
        publisher = ScriptedPublisher(Catalog([AGENTS]))
        async with serving(publisher, port=publisher_port), connect(url) as subscriber:
            await asyncio.wait_for(subscriber.subscribe(Box((0, 0), (10, 10))), 10)
            await eventually(lambda: probe(url, "/readyz")[0] == 200, in_thread=True)
