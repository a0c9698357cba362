"""``POST /v1/publish/{dataset}`` over real sockets, against a scripted publisher: a write's rows
reach the publisher as the ``Publish`` a WebSocket producer would send, and its answer comes back
as JSON with a fitting status; bad input (malformed JSON, wrong types, an oversized body, no
token or one without the producer role) is refused with a clear error and nothing is sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from fanout.auth import AuthConfig, issue
from fanout.http.publishing import MAX_BODY
from fanout.relay.config import Limits
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Catalog, DatasetInfo, Error, Frame, Publish, Published

FLIGHTS = DatasetInfo(
    "flights",
    "id",
    {"id": "<i8", "carrier": "str", "dep_delay": "<f8", "seats": "<i4"},
    "sql",
    [],
    nullable=["carrier", "dep_delay", "seats"],
)
SECRET = "write-secret-" + "k" * 32
URL = "/v1/publish/flights"


class Upstream:
    """A scripted publisher that records writes and answers each with ``reply(publish)``."""

    def __init__(self, reply: Callable[[Publish], Frame]) -> None:
        self.writes: list[Publish] = []
        self._reply = reply
        self.publisher = ScriptedPublisher(Catalog([FLIGHTS]), on_frame=self._take)
        self._tasks: set[asyncio.Task[int]] = set()

    def _take(self, frame: Frame) -> None:
        if isinstance(frame, Publish):
            self.writes.append(frame)
            task = asyncio.get_running_loop().create_task(
                self.publisher.broadcast(self._reply(frame))
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def _offsets(publish: Publish) -> Frame:
    return Published(publish.req, 10, 10 + publish.upserts.length + publish.deletes.length - 1)


@contextlib.asynccontextmanager
async def deployment(
    reply: Callable[[Publish], Frame] = _offsets, **config: object
) -> AsyncIterator[tuple[Upstream, httpx.AsyncClient]]:
    upstream = Upstream(reply)
    async with (
        serving(upstream.publisher) as url,
        running_relay(url, **config) as (relay, relay_url),
        httpx.AsyncClient(base_url=relay_url.replace("ws://", "http://"), timeout=10) as client,
    ):
        await eventually(relay.catalog, what="the publisher's catalog at the relay")
        yield upstream, client


async def test_a_write_reaches_the_publisher_and_answers_its_offsets() -> None:
    body = {
        "upserts": [
            {"id": 1, "carrier": "AA", "dep_delay": 75, "seats": 100},
            {"id": 2, "carrier": None, "dep_delay": None, "seats": None},
        ],
        "deletes": [7],
    }
    async with deployment() as (upstream, client):
        answer = await client.post(URL, json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"first": 10, "last": 12}
    (write,) = upstream.writes
    rows = decode_columns(write.upserts)
    assert rows["id"].tolist() == [1, 2] and rows["dep_delay"].tolist() == [75.0, None]
    assert rows["seats"].dtype == "<i4" and rows["carrier"].tolist() == ["AA", None]
    assert decode_columns(write.deletes)["id"].tolist() == [7]


async def test_the_publishers_refusal_comes_back_with_its_code_and_a_fitting_status() -> None:
    def refuse(publish: Publish) -> Frame:
        code = "ingest_backlog" if publish.deletes.length else "bad_request"
        return Error(code, f"refused: {code}", ref=publish.req)

    async with deployment(refuse) as (_, client):
        answer = await client.post(URL, json={"upserts": [{"id": 1}]})
        assert answer.status_code == 400
        assert answer.json() == {"error": "bad_request", "message": "refused: bad_request"}
        busy = await client.post(URL, json={"deletes": [1]})
        assert busy.status_code == 503 and busy.json()["error"] == "ingest_backlog"


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"upserts": [{"id": 1}', 400, "not a write"),
        (b'[{"id": 1}]', 400, "Expected `object`"),
        (b'{"rows": []}', 400, "unknown field `rows`"),
        (b"{}", 400, "nothing to write"),
        (b'{"upserts": [{"id": "one"}]}', 400, "column 'id' (<i8): expected an integer"),
        (b'{"upserts": [{"id": 1, "dep_delay": "late"}]}', 400, "expected a number"),
        (b'{"upserts": [{"id": 1, "seats": 3000000000}]}', 400, "does not fit <i4"),
        (b'{"upserts": [{"id": 1, "gate": "B2"}]}', 400, "no such column"),
        (b'{"upserts": [{"id": 1}, {"id": 2, "seats": 1}]}', 400, "row 1 has columns"),
        (b'{"deletes": [1.5]}', 400, "expected an integer"),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_sent(
    body: bytes, status: int, says: str
) -> None:
    async with deployment() as (upstream, client):
        answer = await client.post(URL, content=body)
        assert answer.status_code == status
        assert answer.json()["error"] == "bad_request" and says in answer.json()["message"]
    assert upstream.writes == []


async def test_an_unknown_dataset_and_other_methods_are_refused() -> None:
    async with deployment() as (upstream, client):
        unknown = await client.post("/v1/publish/nope", json={"deletes": [1]})
        assert unknown.status_code == 404 and unknown.json()["error"] == "invalid_view"
        get = await client.get(URL)
        assert get.status_code == 405 and get.headers["allow"] == "POST, OPTIONS"
        preflight = await client.options(URL)
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-methods"] == "POST"
        assert "Content-Type" in preflight.headers["access-control-allow-headers"]
    assert upstream.writes == []


async def test_an_oversized_body_is_refused_413_declared_or_streamed() -> None:
    row = b'{"id": 1, "carrier": "' + b"x" * 1000 + b'"},'
    big = b'{"upserts": [' + row * (MAX_BODY // len(row) + 1) + b'{"id": 2}]}'

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]

    async with deployment() as (upstream, client):
        declared = await client.post(URL, content=big)
        assert declared.status_code == 413 and declared.json()["error"] == "too_large"
        streamed = await client.post(URL, content=chunks())
        assert streamed.status_code == 413
        small = await client.post(URL, json={"deletes": [1]})
        assert small.status_code == 200  # the relay serves on
    assert len(upstream.writes) == 1


async def test_a_write_needs_a_token_granting_producer() -> None:
    reader = issue("HS256", SECRET, ["subscriber"])
    writer = issue("HS256", SECRET, ["producer"])
    async with deployment(auth=AuthConfig("HS256", SECRET)) as (upstream, client):
        anonymous = await client.post(URL, json={"deletes": [1]})
        assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"
        forbidden = await client.post(
            URL, json={"deletes": [1]}, headers={"Authorization": f"Bearer {reader}"}
        )
        assert forbidden.status_code == 403 and forbidden.json()["error"] == "forbidden"
        assert upstream.writes == []
        allowed = await client.post(
            URL, json={"deletes": [1]}, headers={"Authorization": f"Bearer {writer}"}
        )
        assert allowed.status_code == 200, allowed.text
    assert len(upstream.writes) == 1


async def test_a_body_that_trickles_is_refused_408_and_a_full_relay_503() -> None:
    async with deployment(limits=Limits(hello_timeout=0.5, max_connections=1)) as (
        upstream,
        client,
    ):
        host, port = str(client.base_url.host), client.base_url.port
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(
            b"POST " + URL.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.read(), 5)  # answered, then closed
        assert head.startswith(b"HTTP/1.1 408 ")
        writer.close()
        async with client.stream("GET", "/v1/subscribe?dataset=flights&view=SELECT * FROM flights"):
            full = await client.post(URL, json={"deletes": [1]})
            assert full.status_code == 503 and full.json()["error"] == "unavailable"
    assert upstream.writes == []
