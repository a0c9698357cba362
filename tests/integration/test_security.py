"""Tokens and TLS on real processes: a Spark publisher and a relay that both require tokens and
serve TLS, as users start them (``fanout publisher --auth-key-file ... --tls-cert ...``).

The relay reaches the publisher over ``wss://`` with its own token; subscribers reach the relay
over ``wss://`` and ``https://``. Every bad token is refused before anything is read, with a
reason, while a subscriber with a good one keeps being served.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from fanout.auth import issue
from fanout.client import connect
from fanout.client.publisher import open_reader
from fanout.launch import Child, start
from fanout.testing.certs import rsa_pair, self_signed
from fanout.tls import client_context
from fanout.views import Box
from fanout.wire.session import HandshakeRefused

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

#: The publisher's shared secret (HS256): it and the relays' operator hold it.
SECRET = "publisher-secret-" + "x" * 32
BOX = Box((200, 200), (450, 450))


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


@pytest.fixture(scope="module")
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(tmp_path: Path, keys: Keys) -> AsyncIterator[Child]:
    child = await start(
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
async def relay(publisher: Child, tmp_path: Path, keys: Keys) -> AsyncIterator[Child]:
    child = await start(
        "relay",
        [
            *("--publisher", publisher.url, "--port", "0"),
            *("--token-file", str(keys.relay_token), "--tls-ca", str(keys.cert)),
            *("--auth-key-file", str(keys.public_file), "--auth-algorithm", "RS256"),
            *("--auth-audience", "fanout-relays"),
            *("--tls-cert", str(keys.cert), "--tls-key", str(keys.key)),
        ],
        tmp_path / "relay.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def test_both_serve_tls_and_a_good_token_is_served(
    publisher: Child, relay: Child, keys: Keys
) -> None:
    assert publisher.url.startswith("wss://") and relay.url.startswith("wss://")
    ssl = client_context(keys.cert)
    async with connect(relay.url, token=keys.subscriber(), ssl=ssl) as subscriber:
        view = await subscriber.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(2), 60)
        assert view.rows


async def test_bad_tokens_are_refused_with_a_reason_while_others_are_served(
    relay: Child, keys: Keys, tmp_path: Path
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
    async with connect(relay.url, token=keys.subscriber(), ssl=ssl) as good:
        view = await good.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(1), 60)
        for token, (code, says) in bad.items():
            with pytest.raises(HandshakeRefused) as refused:
                async with connect(relay.url, token=token, ssl=ssl):
                    pass
            assert refused.value.code == code and says in str(refused.value)
        before = view.updates
        await asyncio.wait_for(view.wait_updates(before + 2), 60)  # still served


async def test_the_http_api_takes_bearer_tokens_and_access_token_over_https(
    relay: Child, keys: Keys
) -> None:
    base = "https://" + urllib.parse.urlsplit(relay.url).netloc
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


async def test_plain_connections_to_a_tls_port_get_nothing(relay: Child) -> None:
    plain = relay.url.replace("wss://", "ws://")
    with pytest.raises(Exception):  # noqa: B017  # whichever way the TLS server drops it
        async with connect(plain, token="whatever"):
            pass


async def test_a_token_with_rules_sees_its_view_within_them_over_both_apis(
    publisher: Child, relay: Child, keys: Keys
) -> None:
    ssl = client_context(keys.cert)
    rules = {"agents": "box:200,200,300,300"}
    granted = Box((200, 200), (300, 300))  # BOX within the rules
    async with connect(relay.url, token=keys.subscriber(rules=rules), ssl=ssl) as subscriber:
        view = await subscriber.subscribe(BOX)
        await asyncio.wait_for(view.wait_updates(2), 60)
        tick, rows = view.tick, dict(view.rows)
    reader_token = issue("HS256", SECRET, ["relay"])
    async with open_reader(publisher.url, token=reader_token, ssl=ssl) as reader:
        _, state = await reader.read("agents", granted, tick)
    assert sorted(rows) == sorted(state["id"].tolist())
    assert all(200 <= r["x"] <= 300 and 200 <= r["y"] <= 300 for r in rows.values())
    base = "https://" + urllib.parse.urlsplit(relay.url).netloc
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
