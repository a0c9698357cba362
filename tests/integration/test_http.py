"""The relay's HTTP API with a plain HTTP client, against a real Spark publisher and relay.

What a user of ``curl -N`` or ``fetch`` sees: the datasets described, a stream of JSON events
(NDJSON and Server-Sent Events, the latter read by httpx-sse) whose rows, applied in order, are
the publisher's state inside the view at the tick of the last push; ``every`` streams resumed
by token and by ``Last-Event-ID`` with no gap; bad requests refused with a status and a
reason while another stream keeps being served.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from httpx_sse import aconnect_sse

from fanout.client.publisher import open_reader
from fanout.launch import Child
from fanout.views import Box

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BOX = Box((200, 200), (450, 450))
TIMEOUT = httpx.Timeout(60.0)


def http(relay: Child) -> str:
    return "http://" + urllib.parse.urlsplit(relay.url).netloc


def subscribe_url(relay: Child, **params: Any) -> str:
    return f"{http(relay)}/v1/subscribe?{urllib.parse.urlencode(params)}"


async def events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line:
            yield json.loads(line)  # strict JSON: Python's reader would take NaN, so check
            assert "NaN" not in line and "Infinity" not in line


def apply(rows: dict[Any, dict], event: dict[str, Any], key: str) -> None:
    if event["full"]:
        rows.clear()
    for gone in event["left"]:
        rows.pop(gone, None)
    for row in [*event["entered"], *event["updated"]]:
        rows[row[key]] = row


def expected_rows(state: dict[str, np.ndarray], view: Box) -> dict[int, dict]:
    inside = np.flatnonzero(view.match(state["x"], state["y"]))
    return {
        int(state["id"][i]): {name: values[i].item() for name, values in state.items()}
        for i in inside
    }


async def test_the_datasets_are_described(relay: Child) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        response = await client.get(f"{http(relay)}/v1/datasets")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    agents = {d["name"]: d for d in response.json()["datasets"]}["agents"]
    assert (agents["key"], agents["view"], agents["index_columns"]) == ("id", "region", ["x", "y"])


async def test_an_ndjson_stream_is_the_publishers_state_inside_the_view(
    publisher: Child, relay: Child
) -> None:
    url = subscribe_url(relay, dataset="agents", view=str(BOX), rate=10)
    rows: dict[Any, dict] = {}
    pushes: list[dict] = []
    async with httpx.AsyncClient(timeout=TIMEOUT) as client, client.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        stream = events(response)
        first = await anext(stream)
        assert first == {"type": "subscribed", "key": "id", "columns": first["columns"]}
        async for event in stream:
            if event["type"] == "push":
                assert event["full"] == (not pushes), "the first push is the full view"
                apply(rows, event, "id")
                pushes.append(event)
                if len(pushes) == 4:
                    break
    assert all(b["tick"] > a["tick"] for a, b in itertools.pairwise(pushes))
    async with open_reader(publisher.url) as reader:
        _, state = await reader.read("agents", BOX, pushes[-1]["tick"])
    assert rows == expected_rows(state, BOX)
    assert rows, "a view of a populated region should not be empty"


async def test_an_every_stream_resumes_by_token_and_by_last_event_id(relay: Child) -> None:
    base = {"dataset": "agents", "view": str(BOX), "mode": "every"}
    seen: list[dict] = []
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        async with client.stream("GET", subscribe_url(relay, **base)) as response:
            async for event in events(response):
                if event["type"] in ("push", "no_update"):
                    seen.append(event)
                    if len(seen) == 3:
                        break
        # again from the token in the URL: the next seq, as a delta, no gap
        async with client.stream("GET", subscribe_url(relay, **base, token=seen[-1]["token"])) as r:
            assert r.status_code == 200
            after = [e async for e in _first(events(r), 2, {"push", "no_update"})]
        assert [e["seq"] for e in after] == [seen[-1]["seq"] + 1, seen[-1]["seq"] + 2]
        assert not any(e.get("full") for e in after)
        # and as Server-Sent Events, from the Last-Event-ID an EventSource sends on reconnecting
        url = subscribe_url(relay, **base, format="sse")
        headers = {"Last-Event-ID": after[-1]["token"]}
        async with aconnect_sse(client, "GET", url, headers=headers) as source:
            assert source.response.headers["content-type"].startswith("text/event-stream")
            resumed = []
            async for sse in source.aiter_sse():
                if sse.event in ("push", "no_update"):
                    data = json.loads(sse.data)
                    assert sse.id == data["token"]
                    resumed.append(data)
                    break
    assert resumed[0]["seq"] == after[-1]["seq"] + 1


async def _first(stream: AsyncIterator[dict], count: int, types: set[str]) -> AsyncIterator[dict]:
    got = 0
    async for event in stream:
        if event["type"] in types:
            yield event
            got += 1
            if got == count:
                return


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"dataset": "agents"}, 400, "parameter 'view' is required"),
        ({"dataset": "ships", "view": "box:0,0,1,1"}, 404, "unknown dataset 'ships'"),
        ({"dataset": "agents", "view": "box:0,0"}, 400, "view:"),
        ({"dataset": "agents", "view": "box:0,0,1,1", "rate": "-1"}, 400, "rate -1.0 must be in"),
        (
            {"dataset": "agents", "view": "box:0,0,1,1", "mode": "every", "token": "xyz"},
            400,
            "token",
        ),
        ({"dataset": "agents", "view": "box:0,0,1,1", "columns": "nope"}, 400, "nope"),
    ],
)
async def test_bad_requests_get_a_status_and_a_reason_while_others_are_served(
    relay: Child, params: dict, status: int, says: str
) -> None:
    good = subscribe_url(relay, dataset="agents", view=str(BOX), rate=20)
    async with httpx.AsyncClient(timeout=TIMEOUT) as client, client.stream("GET", good) as stream:
        served = events(stream)
        await anext(served)
        response = await client.get(subscribe_url(relay, **params))
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        assert says in response.json()["message"], response.json()
        pushes = [e async for e in _first(served, 2, {"push"})]
        assert len(pushes) == 2, "the other stream is still served"


async def test_websocket_subscribers_and_metrics_still_work_on_the_same_port(relay: Child) -> None:
    from fanout.client import connect
    from fanout.metrics import scrape

    async with connect(relay.url) as sub:
        view = await sub.subscribe(BOX)
        await view.wait_updates(2)
    assert "fanout_relay_pushes_total" in scrape(relay.url)


async def test_probes_and_latency_and_version_metrics(publisher: Child, relay: Child) -> None:
    from fanout.metrics import scrape

    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        health = await client.get(f"{http(publisher)}/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")
        ready = await client.get(f"{http(publisher)}/readyz")
        assert (ready.status_code, ready.text) == (200, "ready\n")  # it has served pushes
    relay_metrics = await asyncio.to_thread(scrape, relay.url)
    assert relay_metrics["fanout_relay_tick_to_push_seconds_count"] > 0
    assert relay_metrics["fanout_relay_tick_to_push_seconds_sum"] >= 0
    infos = [name for name in relay_metrics if name.startswith("fanout_build_info{")]
    assert len(infos) == 1 and 'role="relay"' in infos[0]
    published = await asyncio.to_thread(scrape, publisher.url)
    assert any('role="publisher"' in name for name in published if "build_info" in name)


VIEWER_STATE = """JSON.stringify({
    tick: fanoutViewer.tick, view: fanoutViewer.servedView, error: fanoutViewer.error,
    rows: [...fanoutViewer.rows.values()].map((r) => [r.id, r.x, r.y]),
})"""


async def viewer_state(page: Any) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(await page.evaluate(VIEWER_STATE))
    assert state["error"] is None, state["error"]
    return state


async def check_against_publisher(publisher: Child, state: dict[str, Any]) -> Box:
    """The rows the page holds are the publisher's inside the view the page subscribed to."""
    lo_hi = [float(v) for v in state["view"].removeprefix("box:").split(",")]
    box = Box(lo_hi[:2], lo_hi[2:])
    async with open_reader(publisher.url) as reader:
        _, truth = await reader.read("agents", box, state["tick"])
    expected = {
        int(i): (float(x), float(y))
        for i, x, y in zip(truth["id"], truth["x"], truth["y"], strict=True)
    }
    assert {int(i): (x, y) for i, x, y in state["rows"]} == expected
    assert expected, "the view holds agents"
    return box


async def test_the_viewer_shows_the_publishers_rows_and_follows_a_pan(
    publisher: Child, relay: Child, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from fanout.testing.browser import open_browser
    from fanout.testing.wait import eventually

    directory = tmp_path_factory.mktemp("browser")
    url = f"{http(relay)}/?dataset=agents&view=box:200,200,500,500&rate=5"
    async with open_browser(url, directory, size=(1000, 700)) as page:
        assert await page.evaluate("document.title") == "fanout viewer"

        async def settled() -> dict[str, Any] | None:
            state = await viewer_state(page)
            return state if state["rows"] and state["view"] else None

        before = await eventually(settled, timeout=60)
        first = await check_against_publisher(publisher, before)
        await page.drag((600, 400), (300, 400))  # the map moves right: the view moves east
        moved = await eventually(
            lambda: _moved(page, before["view"]), timeout=60, what="the view to follow the pan"
        )
        second = await check_against_publisher(publisher, moved)
        assert second.lo[0] > first.lo[0] and second.lo[1] == pytest.approx(first.lo[1])
        stats = await page.evaluate("document.getElementById('stats').textContent")
        assert "rows" in stats and "latency" in stats and "pushes/s" in stats
        artifacts = Path(os.environ.get("FANOUT_ARTIFACTS", "var/artifacts"))
        shot = await page.screenshot(artifacts / "viewer.png")
    assert shot.stat().st_size > 10_000  # a picture with agents on it, not a blank page


async def _moved(page: Any, old_view: str) -> dict[str, Any] | None:
    state = await viewer_state(page)
    return state if state["view"] != old_view and state["rows"] else None
