"""Fuzzing a real relay's HTTP side over real sockets: hostile clients send HTTP requests with
random and mutated paths, parameters and headers, mutated request bytes and raw bytes, while a
well-behaved subscriber on the same relay is served. Every request is answered with a status
that names the client's mistake (never 5xx but the documented 503 of a full relay) and a JSON
reason, or a clean close for what is not HTTP; no traceback is logged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import urllib.parse
from collections.abc import AsyncIterator

import pytest

from fanout.client import connect
from fanout.relay.config import Limits, Planning
from fanout.relay.core.planner import Policy
from fanout.testing.catalog import AGENTS
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.views import Box
from fanout.wire.messages import Catalog

TICKS = 30
HOSTILE = 6  # clients
REQUESTS = 40  # each
#: What an HTTP answer's status may be: a stream or a page, or the client's mistake.
ANSWERS = {200, 400, 401, 403, 404, 405, 413, 414, 426, 431, 503}
VALUES = {
    "dataset": ["agents", "nope", "", "agents\x00", "a" * 300],
    "view": ["box:0,0,10,10", "box:0,0", "sphere:1,1,5", "box:nan,0,1,1", "box:0,0,1e308,1e308"],
    "mode": ["latest", "every", "sometimes", ""],
    "rate": ["10", "0", "-1", "nan", "1e400", "x"],
    "priority": ["1", "-5", "high"],
    "columns": ["x", "x,y,z", ",,"],
    "token": ["", "AAAA", "%%%", "x" * 200],
    "format": ["ndjson", "sse", "xml"],
    "typo": ["1"],
}
PATHS = ["/v1/subscribe", "/v1/datasets", "/", "/metrics", "/healthz", "/readyz", "/v2/x", "/.."]


def request(rng: random.Random) -> bytes:
    """A GET with random parameters, headers and sometimes a method or path of the wrong kind."""
    params = {name: rng.choice(values) for name, values in VALUES.items() if rng.random() < 0.5}
    path = rng.choice(PATHS) + "?" + urllib.parse.urlencode(params)
    method = rng.choice(["GET"] * 6 + ["POST", "DELETE", "BREW"])
    headers = ["Host: relay", "Connection: close"]
    if rng.random() < 0.3:
        headers.append(f"Last-Event-ID: {rng.choice(['', 'AAAA', 'x' * 100, '%'])}")
    if rng.random() < 0.3:
        headers.append(f"Authorization: Bearer {rng.choice(['', 'a.b.c', 'x' * 50])}")
    if rng.random() < 0.2:
        headers.append("Accept: text/event-stream")
    lines = [f"{method} {path} HTTP/1.1", *headers, "", ""]
    return "\r\n".join(lines).encode()


def hostile_request(rng: random.Random) -> tuple[bytes, bool]:
    """A request, and whether it is whole (a mutated one may lack its end: the server then
    rightly waits for the rest)."""
    roll = rng.random()
    data = request(rng)
    if roll < 0.6:
        return data, True
    if roll < 0.8:
        buffer = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            buffer[rng.randrange(len(buffer))] = rng.randrange(256)
        return bytes(buffer), False
    if roll < 0.9:
        long = b"GET /v1/subscribe?view=" + b"x" * rng.randrange(5_000, 20_000) + b" HTTP/1.1"
        return long + b"\r\n\r\n", True
    return rng.randbytes(rng.randrange(1, 200)), False


async def ask(host: str, port: int, data: bytes, whole: bool) -> tuple[int | None, bytes]:
    """Send one request; the status it was answered (None: closed without one, or a partial
    request left waiting) and the body's beginning."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10 if whole else 1)
        except TimeoutError:
            assert not whole, f"no answer to a whole request: {data[:200]!r}"
            return None, b""
        with contextlib.suppress(TimeoutError):
            body = b""
            body = await asyncio.wait_for(reader.read(4096), 5)
    except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError):
        return None, b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            await writer.wait_closed()
    status_line = head.split(b"\r\n", 1)[0].decode()
    assert status_line.startswith("HTTP/1.1 "), status_line
    return int(status_line.split()[1]), body


async def attack(host: str, port: int, seed: int) -> list[tuple[int | None, bytes]]:
    rng = random.Random(seed)
    return [await ask(host, port, *hostile_request(rng)) for _ in range(REQUESTS)]


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


async def test_hostile_http_requests_get_statuses_and_the_good_subscriber_is_served(
    relay: tuple[ScriptedPublisher, str], caplog: pytest.LogCaptureFixture
) -> None:
    publisher, url = relay
    host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
    assert host is not None and port is not None
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
        attacks = [asyncio.create_task(attack(host, port, seed)) for seed in range(HOSTILE)]
        for tick in range(1, TICKS + 1):
            await publisher.send({"id": [1], "x": [1.0 + tick / 100], "y": [1.0]}, tick=tick)
            await asyncio.sleep(0.05)
        answers = [answer for answered in await asyncio.gather(*attacks) for answer in answered]
        await asyncio.sleep(0.3)
        following.cancel()
    statuses = {status for status, _ in answers}
    assert statuses - {None} <= ANSWERS, statuses
    assert {400, 404} <= statuses  # the fuzzing reached the API's checks
    for status, body in answers:
        if status is not None and status >= 400 and body.startswith(b"{"):
            reason = json.loads(body)
            assert reason["error"] and reason["message"], reason
    assert sum(1 for t in range(1, TICKS + 1) if t in ticks) >= 0.9 * TICKS, ticks
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
