"""The relay's HTTP side over real sockets, against a scripted publisher: a stream's
subscription lives as long as its connection, the relay's connection limit holds for streams
too, the viewer's files are served, CORS preflights are answered, and a stream whose part moved
ends saying where it goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx

from fanout.client import connect
from fanout.relay.config import Limits, Planning
from fanout.relay.core.planner import Policy
from fanout.testing.catalog import catalog, sensors
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire.messages import Error, Subscribe

QUERY = "/v1/subscribe?dataset=agents&view=box:0,0,10,10"


@contextlib.asynccontextmanager
async def deployment(**config: object) -> AsyncIterator[tuple[ScriptedPublisher, object, str]]:
    publisher = ScriptedPublisher(catalog())
    async with (
        serving(publisher) as url,
        running_relay(url, planning=Planning(Policy(widen="margin")), **config) as (
            relay,
            relay_url,
        ),
    ):
        yield publisher, relay, relay_url.replace("ws://", "http://")


async def test_a_streams_subscription_ends_when_its_client_goes_away() -> None:
    async with deployment() as (publisher, relay, base), httpx.AsyncClient(timeout=10) as client:
        async with client.stream("GET", base + QUERY) as stream:
            lines = stream.aiter_lines()
            assert json.loads(await anext(lines))["type"] == "subscribed"
            acquire = await publisher.next_acquire()
            await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
            push = json.loads(await anext(lines))
            assert push["full"] and push["entered"] == [{"id": 1, "x": 1.0, "y": 1.0}]
            assert relay.core.stats()["subscriptions"] == 1  # type: ignore[attr-defined]
        await eventually(lambda: relay.core.stats()["subscriptions"] == 0)  # type: ignore[attr-defined]


async def test_streams_count_against_the_relays_connection_limit() -> None:
    async with (
        deployment(limits=Limits(max_connections=1)) as (_, _, base),
        httpx.AsyncClient(timeout=10) as client,
        client.stream("GET", base + QUERY) as first,
    ):
        assert first.status_code == 200
        second = await client.get(base + QUERY)
        assert (second.status_code, second.json()["error"]) == (503, "unavailable")
        assert "max_connections" in second.json()["message"]


async def test_the_viewer_is_served_at_the_root() -> None:
    async with deployment() as (_, _, base), httpx.AsyncClient(timeout=10) as client:
        page = await client.get(base + "/")
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert '<script type="module" src="/viewer.js">' in page.text
        script = await client.get(base + "/viewer.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert "window.fanoutViewer" in script.text
        for module in ("/map.js", "/viewtext.js", "/fanout-client.js"):  # what it imports
            imported = await client.get(base + module)
            assert imported.headers["content-type"].startswith("text/javascript"), module
        assert "var Client = class" in imported.text  # @fanout/client, bundled
        assert imported.headers["access-control-allow-origin"] == "*"  # any page may import it
        assert (await client.get(base + "/viewer.css")).status_code == 200
        assert (await client.get(base + "/nothing-here")).status_code == 426  # a WebSocket port


async def ask(base: str, request: bytes) -> bytes:
    """What the relay's port answers ``request`` (raw bytes), until it closes."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_requests_the_port_cannot_read_get_a_status_and_websockets_share_the_port() -> None:
    async with deployment() as (_, _, base):
        garbage = await ask(base, b"NOT HTTP AT ALL\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert json.loads(garbage.split(b"\r\n\r\n", 1)[1])["error"] == "bad_request"
        huge = await ask(base, b"GET /?" + b"x" * 20_000)  # a head past h11's 16 KiB, unended
        assert huge.startswith(b"HTTP/1.1 431 ")
        async with connect(base.replace("http://", "ws://")) as subscriber:  # the same port
            view = await subscriber.subscribe(Box((0, 0), (10, 10)))
            assert view.sub == 1
        old = await ask(base, b"GET /v1/subscribe?dataset=nope&view=box:0,0,1,1 HTTP/1.0\r\n\r\n")
        assert old.startswith(b"HTTP/1.1 404 Not Found\r\n")


async def test_a_cors_preflight_is_answered_and_other_methods_are_refused() -> None:
    """A browser's EventSource reconnecting to another relay sends Last-Event-ID, which the
    Fetch standard does not safelist: it may ask first (OPTIONS)."""
    async with deployment() as (_, relay, base), httpx.AsyncClient(timeout=10) as client:
        asked = await client.options(
            base + QUERY,
            headers={
                "Origin": "http://elsewhere.example",
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "last-event-id",
            },
        )
        assert asked.status_code == 204
        assert asked.headers["access-control-allow-origin"] == "*"
        assert asked.headers["access-control-allow-methods"] == "GET"
        allowed = asked.headers["access-control-allow-headers"].lower()
        assert "last-event-id" in allowed and "authorization" in allowed
        posted = await client.delete(base + QUERY)
        assert (posted.status_code, posted.json()["error"]) == (405, "bad_request")
        assert posted.headers["allow"] == "GET, OPTIONS"
        assert relay.core.stats()["subscriptions"] == 0  # type: ignore[attr-defined]
        async with client.stream("GET", base + QUERY) as stream:  # and GET still streams
            assert json.loads(await anext(stream.aiter_lines()))["type"] == "subscribed"


async def test_the_viewer_shows_a_topic_dataset_as_a_table_that_highlights_changes(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    from fanout.testing.browser import open_browser

    publisher = ScriptedPublisher(catalog(sensors()))
    async with (
        serving(publisher) as url,
        running_relay(url, planning=Planning(Policy(widen="exact"))) as (_, relay_url),
    ):
        base = relay_url.replace("ws://", "http://")
        page_url = f"{base}/?dataset=sensors&view=plant/%2B/temp"
        async with open_browser(page_url, tmp_path / "browser") as page:
            rows = {
                "topic": ["plant/1/temp", "plant/2/temp", "yard/1/temp"],
                "value": [1.0, 2.0, 3.0],
            }

            async def table_now() -> list[list[str]]:
                """The table's rows as the page shows them: class, then cells."""
                return await page.evaluate(  # type: ignore[no-any-return]
                    "[...document.querySelectorAll('#table tbody tr')]"
                    ".map((tr) => [tr.className, ...[...tr.cells].map((td) => td.textContent)])"
                )

            async def shown() -> list[list[str]]:  # snapshots of what was acquired, until shown
                await publisher.send(rows, dataset="sensors", snapshots=publisher.take_fresh())
                return await table_now()

            table = await eventually(shown, lambda t: len(t) == 2, timeout=30)
            assert sorted(row[1:] for row in table) == [
                ["plant/1/temp", "1"],
                ["plant/2/temp", "2"],
            ]
            assert {row[0] for row in table} <= {"entered", "updated"}  # just arrived or resent
            assert await page.evaluate("document.getElementById('view').value") == "plant/+/temp"
            await publisher.send(dataset="sensors", deletes=["plant/2/temp"])
            flashed = await eventually(
                table_now, lambda t: ["left", "plant/2/temp", "2"] in t, timeout=30
            )
            assert ["plant/1/temp", "1"] in [row[1:] for row in flashed]
            await eventually(table_now, lambda t: [row[1] for row in t] == ["plant/1/temp"])
            await page.screenshot(tmp_path / "table.png")


class Elsewhere:
    """A registry (``cluster``) making another relay responsible for every new view."""

    def __init__(self, url: str) -> None:
        self.url = url

    def redirect(self, request: Subscribe, held: bool) -> Error | None:
        message = f"relay b is responsible: subscribe at {self.url}"
        return None if held else Error("redirect", message, ref=request.sub, location=self.url)

    async def confirm(self, request: Subscribe) -> None:
        """Its map is never stale: nothing to read again."""

    def samples(self) -> list[object]:
        return []


async def test_a_stream_another_relay_is_responsible_for_is_a_307_there_that_clients_follow() -> (
    None
):
    publisher = ScriptedPublisher(catalog())
    async with (
        serving(publisher) as url,
        running_relay(url, planning=Planning(Policy(widen="margin"))) as (relay_a, a_url),
        running_relay(url, planning=Planning(Policy(widen="margin"))) as (_, b_url),
        httpx.AsyncClient(timeout=10) as client,
    ):
        relay_a.registry = Elsewhere(b_url)  # type: ignore[assignment]
        a, b = a_url.replace("ws://", "http://"), b_url.replace("ws://", "http://")
        moved = await client.get(a + QUERY)
        assert moved.status_code == 307
        assert moved.headers["location"] == b + QUERY
        assert (moved.json()["error"], moved.json()["location"]) == ("redirect", b + QUERY)
        async with client.stream("GET", a + QUERY, follow_redirects=True) as stream:
            assert str(stream.url) == b + QUERY
            assert json.loads(await anext(stream.aiter_lines()))["type"] == "subscribed"


async def test_a_held_stream_whose_part_moved_ends_with_where_to_go_and_goes_on_there() -> None:
    """The relay's end of a move over real sockets: a split takes the stream's part (as
    ``cluster.membership`` carries it out: the subscription ended, the redirect given to
    its connection); the stream's last event names the same request at the other relay, and a
    client following it (``fanout.testing.httpstream``) is served there."""
    import asyncio

    from fanout.cluster.responsibility import Assignment, ResponsibilityMap, part_of
    from fanout.cluster.splitting import moved_subscriptions
    from fanout.testing.httpstream import Following
    from fanout.views import Box
    from fanout.wire import codec
    from fanout.wire.messages import Unsubscribe

    publisher = ScriptedPublisher(catalog())
    async with (
        serving(publisher) as url,
        running_relay(url, planning=Planning(Policy(widen="margin"))) as (relay_a, a_url),
        running_relay(url, planning=Planning(Policy(widen="margin"))) as (_, b_url),
        httpx.AsyncClient(timeout=10) as client,
    ):
        a, b = a_url.replace("ws://", "http://"), b_url.replace("ws://", "http://")
        stream = Following(a + QUERY + "&rate=50")
        stream.task = asyncio.create_task(stream.run(client))
        try:
            acquire = await publisher.next_acquire()
            await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
            await eventually(lambda: [e["type"] for e in stream.checked()][-1:] == ["push"])
            part = part_of("agents", Box((0, 0), (10, 10)))
            before = ResponsibilityMap({"a": a_url})
            after = ResponsibilityMap(
                {"a": a_url, "b": b_url}, assigned={part: Assignment("b", "a")}
            )
            core, open_ = relay_a.core, relay_a.clients.open  # type: ignore[attr-defined]
            for held, redirect in moved_subscriptions(core, before, after, "a"):
                core.on_unsubscribe(held, Unsubscribe(redirect.ref))
                open_[held].offer(codec.encode(redirect))
            there = await publisher.next_acquire()
            await publisher.send({"id": [1], "x": [2.0], "y": [1.0]}, snapshots=[there.prim])
            events = await eventually(
                stream.checked, lambda got: [e["type"] for e in got].count("push") == 2
            )
        finally:
            await stream.stop()
    assert [e["type"] for e in events] == ["subscribed", "push", "moved", "subscribed", "push"]
    moved = events[2]
    assert moved["location"] == b + QUERY + "&rate=50" and "token" not in moved
    assert [url.split("/v1/")[0] for url in stream.served_at] == [a, b]
    assert events[-1]["full"] and events[-1]["entered"] == [{"id": 1, "x": 2.0, "y": 1.0}]
