"""Any client, safely: the HTTP streaming API, the live viewer, tokens, TLS and access rules,
on real processes started as users start them — one Spark publisher requiring tokens and
serving TLS (``fanout publisher --auth-key-file ... --tls-cert ...``), a relay that asks its
subscribers for no token, and one that requires tokens (RS256) and serves ``wss://`` and
``https://``. Both reach the publisher over ``wss://`` with their own token.

What a user of ``curl -N``, ``fetch`` or a browser sees: the datasets described; a stream of
JSON events (NDJSON, and Server-Sent Events read by httpx-sse) whose rows, applied in order,
are the publisher's state inside the view at the tick of the last push; ``every`` streams
resumed by token and by ``Last-Event-ID`` with no gap; the viewer's page in headless Chromium
holding the publisher's rows and following a pan; bad requests and bad tokens refused with a
status and a reason while other subscribers keep being served; a token's access rules.
"""

from __future__ import annotations

import asyncio
import contextlib
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
import pytest_asyncio
from httpx_sse import aconnect_sse

from fanout.auth import issue
from fanout.client import connect
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.testing.certs import rsa_pair, self_signed
from fanout.tls import client_context
from fanout.views import Box
from fanout.wire.handshake import HandshakeRefused

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

#: The publisher's shared secret (HS256): it and the relays' operator hold it.
SECRET = "publisher-secret-" + "x" * 32
BOX = Box((200, 200), (450, 450))
TIMEOUT = httpx.Timeout(60.0)


class Keys:
    def __init__(self, directory: Path) -> None:
        self.cert, self.key = self_signed(directory / "tls")
        self.private, public = (
            rsa_pair()
        )  # subscribers' tokens: RS256, the relay has the public key
        self.secret_file = directory / "secret"
        self.secret_file.write_text(SECRET)
        self.public_file = directory / "public.pem"
        self.public_file.write_text(public)
        self.relay_token = directory / "relay.token"
        self.relay_token.write_text(issue("HS256", SECRET, ["relay"], subject="relay-1"))

    def subscriber(self, **options: object) -> str:
        options.setdefault("audience", "fanout-relays")
        return issue("RS256", self.private, ["subscriber"], **options)  # type: ignore[arg-type]


def reader(publisher: Child, keys: Keys) -> contextlib.AbstractAsyncContextManager[Any]:
    """A reader of the publisher's state (role ``relay``), over TLS."""
    token = issue("HS256", SECRET, ["relay"], subject="test-reader")
    return open_reader(publisher.url, token=token, ssl=client_context(keys.cert))


@pytest.fixture(scope="module")
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path, keys: Keys) -> AsyncIterator[Child]:
    child = await children.start(
        "publisher",
        [
            *("--port", "0", "--state-dir", str(tmp_path / "publisher"), "--agents", "2000"),
            *("--auth-key-file", str(keys.secret_file)),
            *("--tls-cert", str(keys.cert), "--tls-key", str(keys.key)),
        ],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def secure_relay(
    children: Children, publisher: Child, tmp_path: Path, keys: Keys
) -> AsyncIterator[Child]:
    child = await children.start(
        "relay",
        [
            *("--publisher", publisher.url, "--port", "0"),
            *("--token-file", str(keys.relay_token), "--tls-ca", str(keys.cert)),
            *("--auth-key-file", str(keys.public_file), "--auth-algorithm", "RS256"),
            *("--auth-audience", "fanout-relays"),
            *("--tls-cert", str(keys.cert), "--tls-key", str(keys.key)),
        ],
        tmp_path / "secure-relay.log",
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def relay(
    children: Children, publisher: Child, tmp_path: Path, keys: Keys
) -> AsyncIterator[Child]:
    """A relay that asks subscribers for no token (its link to the publisher still uses one)."""
    child = await children.start(
        "relay",
        [
            *("--publisher", publisher.url, "--port", "0"),
            *("--token-file", str(keys.relay_token), "--tls-ca", str(keys.cert)),
        ],
        tmp_path / "relay.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def test_both_serve_tls_and_a_good_token_is_served(
    publisher: Child, secure_relay: Child, keys: Keys
) -> None:
    assert publisher.url.startswith("wss://") and secure_relay.url.startswith("wss://")
    ssl = client_context(keys.cert)
    async with connect(secure_relay.url, token=keys.subscriber(), ssl=ssl) as subscriber:
        view = await subscriber.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(2), 60)
        assert view.rows


async def test_bad_tokens_are_refused_with_a_reason_while_others_are_served(
    secure_relay: Child, keys: Keys, tmp_path: Path
) -> None:
    ssl = client_context(keys.cert)
    forger, _ = rsa_pair()
    bad = {
        "": ("unauthorized", "a token is required"),
        keys.subscriber(ttl=-30): ("unauthorized", "expired"),
        keys.subscriber(audience="another-service"): ("unauthorized", "another audience"),
        issue("RS256", forger, ["subscriber"], audience="fanout-relays"): (
            "unauthorized",
            "signature does not verify",
        ),
        issue("HS256", SECRET, ["subscriber"], audience="fanout-relays"): (
            "unauthorized",
            "not signed with RS256",
        ),
        issue("RS256", keys.private, ["producer"], audience="fanout-relays"): (
            "forbidden",
            "does not grant role 'subscriber'",
        ),
    }
    async with connect(secure_relay.url, token=keys.subscriber(), ssl=ssl) as good:
        view = await good.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(1), 60)
        for token, (code, says) in bad.items():
            with pytest.raises(HandshakeRefused) as refused:
                async with connect(secure_relay.url, token=token, ssl=ssl):
                    pass
            assert refused.value.code == code and says in str(refused.value)
        before = view.updates
        await asyncio.wait_for(view.wait_updates(before + 2), 60)  # still served


async def test_the_http_api_takes_bearer_tokens_and_access_token_over_https(
    secure_relay: Child, keys: Keys
) -> None:
    base = "https://" + urllib.parse.urlsplit(secure_relay.url).netloc
    query = urllib.parse.urlencode({"dataset": "agents", "view": str(BOX)})
    async with httpx.AsyncClient(verify=client_context(keys.cert), timeout=60) as client:
        response = await client.get(f"{base}/v1/datasets")
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "a token is required" in response.json()["message"]
        response = await client.get(f"{base}/v1/subscribe?{query}")
        assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
        expired = {"Authorization": f"Bearer {keys.subscriber(ttl=-30)}"}
        response = await client.get(f"{base}/v1/subscribe?{query}", headers=expired)
        assert response.status_code == 401 and "expired" in response.json()["message"]
        producer = issue("RS256", keys.private, ["producer"], audience="fanout-relays")
        response = await client.get(
            f"{base}/v1/subscribe?{query}", headers={"Authorization": f"Bearer {producer}"}
        )
        assert (response.status_code, response.json()["error"]) == (403, "forbidden")
        good = {"Authorization": f"Bearer {keys.subscriber()}"}
        assert (await client.get(f"{base}/v1/datasets", headers=good)).status_code == 200
        url = f"{base}/v1/subscribe?{query}&access_token={keys.subscriber()}"
        async with client.stream("GET", url) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert '"subscribed"' in await anext(lines)
            assert '"push"' in await anext(lines)


async def test_the_publisher_refuses_readers_without_a_relay_token(
    publisher: Child, keys: Keys
) -> None:
    ssl = client_context(keys.cert)
    with pytest.raises(HandshakeRefused) as refused:
        async with open_reader(publisher.url, ssl=ssl):
            pass
    assert refused.value.code == "unauthorized"
    subscriber = issue("HS256", SECRET, ["subscriber"])
    with pytest.raises(HandshakeRefused) as refused:
        async with open_reader(publisher.url, token=subscriber, ssl=ssl):
            pass
    assert refused.value.code == "forbidden"
    reader = issue("HS256", SECRET, ["relay"])
    async with open_reader(publisher.url, token=reader, ssl=ssl) as client:
        _, rows = await client.read("agents", BOX)
    assert len(rows["id"]) > 0


async def test_plain_connections_to_a_tls_port_get_nothing(secure_relay: Child) -> None:
    plain = secure_relay.url.replace("wss://", "ws://")
    with pytest.raises(Exception):  # noqa: B017  # whichever way the TLS server drops it
        async with connect(plain, token="whatever"):
            pass


async def test_a_token_with_rules_sees_its_view_within_them_over_both_apis(
    publisher: Child, secure_relay: Child, keys: Keys
) -> None:
    ssl = client_context(keys.cert)
    rules = {"agents": "box:200,200,300,300"}
    granted = Box((200, 200), (300, 300))  # BOX within the rules
    async with connect(secure_relay.url, token=keys.subscriber(rules=rules), ssl=ssl) as subscriber:
        view = await subscriber.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(2), 60)
        tick, rows = view.tick, dict(view.rows)
    reader_token = issue("HS256", SECRET, ["relay"])
    async with open_reader(publisher.url, token=reader_token, ssl=ssl) as reader:
        _, state = await reader.read("agents", granted, tick)
    assert sorted(rows) == sorted(state["id"].tolist())
    assert all(200 <= r["x"] <= 300 and 200 <= r["y"] <= 300 for r in rows.values())
    base = "https://" + urllib.parse.urlsplit(secure_relay.url).netloc
    query = urllib.parse.urlencode({"dataset": "agents", "view": str(BOX)})
    headers = {"Authorization": f"Bearer {keys.subscriber(rules=rules)}"}
    async with (
        httpx.AsyncClient(verify=ssl, timeout=60) as client,
        client.stream("GET", f"{base}/v1/subscribe?{query}", headers=headers) as stream,
    ):
        lines = stream.aiter_lines()
        await anext(lines)
        push = json.loads(await anext(lines))
    assert push["entered"]
    assert all(200 <= r["x"] <= 300 and 200 <= r["y"] <= 300 for r in push["entered"])
    outside = {"Authorization": f"Bearer {keys.subscriber(rules={'agents': 'box:0,0,10,10'})}"}
    async with httpx.AsyncClient(verify=ssl, timeout=60) as client:
        response = await client.get(f"{base}/v1/subscribe?{query}", headers=outside)
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")
    assert "outside your rules" in response.json()["message"]


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
    publisher: Child, relay: Child, keys: Keys
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
    async with reader(publisher, keys) as client:
        _, state = await client.read("agents", BOX, pushes[-1]["tick"])
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


async def test_probes_and_latency_and_version_metrics(
    publisher: Child, relay: Child, keys: Keys
) -> None:
    from fanout.metrics import scrape

    ssl = client_context(keys.cert)
    base = "https://" + urllib.parse.urlsplit(publisher.url).netloc
    async with httpx.AsyncClient(timeout=TIMEOUT, verify=ssl) as client:
        health = await client.get(f"{base}/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")
        ready = await client.get(f"{base}/readyz")
        assert (ready.status_code, ready.text) == (200, "ready\n")  # it has served pushes
    relay_metrics = await asyncio.to_thread(scrape, relay.url)
    pushed = relay_metrics["fanout_relay_tick_to_push_seconds_count"]
    assert pushed > 0
    # Real latencies, measured from each tick's time on the publisher's clock (this machine's):
    # a push takes some time after its tick, and seconds, not the 1.7e9 s since the epoch of
    # a tick time left at 0 or taken from another clock.
    mean = relay_metrics["fanout_relay_tick_to_push_seconds_sum"] / pushed
    assert 0 < mean < 60, mean
    infos = [name for name in relay_metrics if name.startswith("fanout_build_info{")]
    assert len(infos) == 1 and 'role="relay"' in infos[0]
    published = await asyncio.to_thread(scrape, publisher.url, 10.0, ssl)
    assert any('role="publisher"' in name for name in published if "build_info" in name)


VIEWER_STATE = """JSON.stringify({
    tick: fanoutViewer.tick, view: fanoutViewer.servedView, error: fanoutViewer.error,
    rows: [...fanoutViewer.rows.values()].map((r) => [r.id, r.x, r.y]),
})"""


async def viewer_state(page: Any) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(await page.evaluate(VIEWER_STATE))
    assert state["error"] is None, state["error"]
    return state


async def check_against_publisher(publisher: Child, keys: Keys, state: dict[str, Any]) -> Box:
    """The rows the page holds are the publisher's inside the view the page subscribed to."""
    lo_hi = [float(v) for v in state["view"].removeprefix("box:").split(",")]
    box = Box(lo_hi[:2], lo_hi[2:])
    async with reader(publisher, keys) as client:
        _, truth = await client.read("agents", box, state["tick"])
    expected = {
        int(i): (float(x), float(y))
        for i, x, y in zip(truth["id"], truth["x"], truth["y"], strict=True)
    }
    assert {int(i): (x, y) for i, x, y in state["rows"]} == expected
    assert expected, "the view holds agents"
    return box


async def test_the_viewer_shows_the_publishers_rows_and_follows_a_pan(
    publisher: Child, relay: Child, keys: Keys, tmp_path_factory: pytest.TempPathFactory
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
        first = await check_against_publisher(publisher, keys, before)
        await page.drag((600, 400), (300, 400))  # the map moves right: the view moves east
        moved = await eventually(
            lambda: _moved(page, before["view"]), timeout=60, what="the view to follow the pan"
        )
        second = await check_against_publisher(publisher, keys, moved)
        assert second.lo[0] > first.lo[0] and second.lo[1] == pytest.approx(first.lo[1])
        stats = await page.evaluate("document.getElementById('stats').textContent")
        assert "rows" in stats and "latency" in stats and "pushes/s" in stats
        artifacts = Path(os.environ.get("FANOUT_ARTIFACTS", "var/artifacts"))
        shot = await page.screenshot(artifacts / "viewer.png")
    assert shot.stat().st_size > 10_000  # a picture with agents on it, not a blank page


async def _moved(page: Any, old_view: str) -> dict[str, Any] | None:
    state = await viewer_state(page)
    return state if state["view"] != old_view and state["rows"] else None
