"""A connection ends when its token expires, at a real relay (real sockets) on a scripted
publisher: a subscriber, an HTTP stream and a relay below are each told ``unauthorized``, "the
token has expired", and closed (1008; the HTTP stream with a last error line), while a
subscriber with a longer token on the same relay goes on being served."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from fanout.auth import AuthConfig, issue
from fanout.client import LiveView, Subscriber, connect
from fanout.relay.config import Listening, Planning
from fanout.relay.core.planner import Policy
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Catalog, DatasetInfo, Error, Hello, Welcome

SECRET = "expiry-secret-" + "e" * 32
AGENTS = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
#: Seconds the short tokens live: long enough for the handshake on a loaded machine.
SHORT = 3.0
EXPIRED = Error(code="unauthorized", message="the token has expired")


def token(roles: list[str], ttl: float = 3600.0) -> str:
    return issue("HS256", SECRET, roles, ttl=ttl)


@contextlib.asynccontextmanager
async def deployment(**config: object) -> AsyncIterator[tuple[ScriptedPublisher, str]]:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with (
        serving(publisher) as url,
        running_relay(
            url,
            planning=Planning(Policy(widen="exact")),
            auth=AuthConfig("HS256", SECRET),
            **config,
        ) as (_, relay_url),
    ):
        yield publisher, relay_url


async def served(publisher: ScriptedPublisher, other: Subscriber) -> LiveView:
    """A subscription of ``other``'s, served its first rows."""
    kept = await other.subscribe(Box((0, 0), (10, 10)))
    acquire = await publisher.next_acquire()
    await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
    await kept.wait_updates(1)
    return kept


async def served_on(publisher: ScriptedPublisher, view: LiveView, tick: int) -> None:
    """Send a tick and wait until ``view`` has it: the subscriber is still served."""
    await publisher.send({"id": [1], "x": [1.0], "y": [float(tick)]}, tick=tick)
    await eventually(lambda: view.rows.get(1, {}).get("y") == float(tick), timeout=30)


async def test_a_subscriber_is_told_and_closed_when_its_token_expires() -> None:
    async with deployment() as (publisher, url), connect(url, token=token(["subscriber"])) as other:
        kept = await served(publisher, other)
        expires = time.time() + SHORT
        async with connect(url, token=token(["subscriber"], ttl=SHORT)) as short:
            view = await short.subscribe(Box((0, 0), (10, 10)))
            await eventually(lambda: view.error is not None, timeout=SHORT + 30, every=0.1)
            assert time.time() >= int(expires) - 0.5, "ended before its token expired"
            assert short.errors == [EXPIRED]
            assert view.error is not None and "1008" in str(view.error)
            assert "the token has expired" in str(view.error)
        for tick in (2, 3):
            await served_on(publisher, kept, tick)


async def test_an_http_stream_ends_with_an_error_line_when_its_token_expires() -> None:
    async with deployment() as (publisher, url), connect(url, token=token(["subscriber"])) as other:
        kept = await served(publisher, other)
        base = url.replace("ws://", "http://")
        query = "/v1/subscribe?dataset=agents&view=box:0,0,10,10&format=ndjson"
        headers = {"Authorization": f"Bearer {token(['subscriber'], ttl=SHORT)}"}
        lines: list[dict] = []
        async with (
            httpx.AsyncClient(timeout=SHORT + 30) as client,
            client.stream("GET", base + query, headers=headers) as stream,
        ):
            assert stream.status_code == 200
            async for line in stream.aiter_lines():  # to the end of the response
                if line:
                    lines.append(json.loads(line))
        assert lines[0]["type"] == "subscribed"
        assert lines[-1] == {
            "type": "error",
            "error": "unauthorized",
            "message": "the token has expired",
        }
        await served_on(publisher, kept, 4)


async def test_a_relay_below_is_told_and_closed_when_its_token_expires() -> None:
    async with (
        deployment(listening=Listening(serve_relays=True)) as (publisher, url),
        connect(url, token=token(["subscriber"])) as other,
    ):
        kept = await served(publisher, other)
        hello = Hello(PROTOCOL_VERSION, "relay", "below", token=token(["relay"], ttl=SHORT))
        frames: list[object] = []
        async with ws_connect(url, max_size=None) as below:
            await below.send(codec.encode(hello))
            try:
                async with asyncio.timeout(SHORT + 30):
                    async for message in below:
                        frames.append(codec.from_publisher().decode(message))
            except ConnectionClosed:
                pass
            assert below.close_code == 1008
            assert below.close_reason == "the token has expired"
        assert isinstance(frames[0], Welcome)
        assert frames[-1] == EXPIRED
        await served_on(publisher, kept, 5)
