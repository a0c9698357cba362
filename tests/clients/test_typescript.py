"""The TypeScript client (clients/typescript, issue 42 part 2) against a real Spark publisher and
relay: ``node`` scripts using the built package hold a box view (``latest``) and SQL views over
timestamp, date, decimal and bytes columns with NULLs, compared with the publisher's own read,
and an ``every`` view across a relay restart, audited against the publisher's log.

The package is built once (``npm ci``, ``npm run build``: tests/clients/conftest.py) when
``node_modules`` or an up-to-date ``dist`` is missing; without ``node`` 20+ and ``npm`` the
module is skipped, saying so. Its unit tests (``npm test``) run in test_package_tests.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import functools
import http.server
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from fanout.client.publisher import open_producer, open_reader
from fanout.launch import Child, Children
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.httpstream import updates_of
from fanout.testing.needs import need
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.views.sql import parse as sql
from fanout.wire.columns import to_python

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

FOLLOW = Path(__file__).parent / "node" / "follow.mjs"
UTC = datetime.UTC
CONFIG = """
[datasets.agents]
source = {{ kind = "simulation", agents = 2000 }}

[datasets.orders]
key = "order_id"
schema = {{ order_id = "long", customer = "string", amount = "double" }}
index = "sql"
source = "ingest"

[datasets.bookings]
key = "id"
index = "sql"
source = "ingest"

[datasets.bookings.schema]
id = "long"
booked = "timestamp"
day = "date"
fare = "decimal(8,2)"
seat = "int"
ticket = "bytes"
who = "string"
"""
BOOKINGS = [
    {
        "id": 1,
        "booked": datetime.datetime(2026, 11, 29, 4, 47, 25, 123456, tzinfo=UTC),
        "day": datetime.date(2026, 12, 24),
        "fare": decimal.Decimal("129.90"),
        "seat": 12,
        "ticket": b"\x00\xff\x00",
        "who": "Ada",
    },
    {"id": 2, "booked": None, "day": None, "fare": None, "seat": None, "ticket": None, "who": None},
    {
        "id": 3,
        "booked": datetime.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC),
        "day": datetime.date(1969, 7, 21),
        "fare": decimal.Decimal("-0.01"),
        "seat": 3,
        "ticket": b"",
        "who": "Neil",
    },
]
BOX = Box((200, 200), (450, 450))
ORDERS = [
    {"order_id": 1, "customer": "ada", "amount": 120.5},
    {"order_id": 2, "customer": "<b>bob</b>", "amount": 300.0},
    {"order_id": 3, "customer": "cy", "amount": 99.0},
]
#: What the walkthrough's page holds (docs/typescript.md, clients/typescript/examples/).
EXAMPLE_STATE = """JSON.stringify(window.fanoutExample?.orders ? {
  agents: fanoutExample.map.rows.size,
  orders: [...fanoutExample.orders.rows.keys()].sort(),
  cells: [...document.querySelectorAll("#orders td")].map((td) => td.textContent),
} : null)"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> AsyncIterator[tuple[Child, Child]]:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG.format())
    publisher = await children.start(
        "publisher",
        ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")],
        tmp_path / "publisher.log",
    )
    try:
        relay = await children.start(
            "relay", ["--publisher", publisher.url, "--port", "0"], tmp_path / "relay.log"
        )
        try:
            yield publisher, relay
        finally:
            await relay.stop()
    finally:
        await publisher.stop()


class Follower:
    """``node follow.mjs``: its JSON lines as they come (``lines``), stopped by ``stop``."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            self.lines.append(json.loads(line))

    def updates(self) -> list[dict[str, Any]]:
        return [e for e in self.lines if e["type"] in ("push", "no_update")]

    def failed(self) -> list[dict[str, Any]]:
        return [e for e in self.lines if e["type"] == "error"]

    async def until(self, what: str, done: Any, timeout: float = 120) -> list[dict[str, Any]]:
        """The updates once ``done(updates)`` holds (the script's own error fails at once)."""

        def check(updates: list[dict[str, Any]]) -> bool:
            assert not self.failed(), self.failed()
            holds = bool(done(updates))
            finished = self.process.returncode is not None and self.reading.done()
            assert holds or not finished, f"node exited ({self.process.returncode}) first"
            return holds

        try:
            return await eventually(self.updates, check, timeout=timeout, every=0.1, what=what)
        except AssertionError:
            raise
        except Exception as exc:
            seen = [(e["seq"], e.get("failovers")) for e in self.updates()]
            raise AssertionError(f"{exc!s:.300}: seqs and failovers {seen}") from exc

    async def stop(self) -> str:
        if self.process.returncode is None:
            self.process.terminate()
        await self.process.wait()
        await self.reading
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode()


@pytest_asyncio.fixture(loop_scope="module")
async def follow(package: Path) -> AsyncIterator[Any]:
    """Start ``node follow.mjs`` with a spec; every one started is stopped when the test ends."""
    started: list[Follower] = []

    async def start(**spec: Any) -> Follower:
        process = await asyncio.create_subprocess_exec(
            "node",
            str(FOLLOW),
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "FANOUT_CLIENT": str(package)},
            limit=64 << 20,
        )
        started.append(Follower(process))
        return started[-1]

    yield start
    for follower in started:
        await follower.stop()


def untagged(value: Any) -> Any:
    """A value the node script printed, as the Python client holds it."""
    if not isinstance(value, dict):
        return value
    ((kind, text),) = value.items()
    if kind == "timestamp":
        micros = int(text)
        return datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=micros)
    if kind == "date":
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=text)
    return {
        "int": int,
        "float": float,
        "decimal": decimal.Decimal,
        "bytes": bytes.fromhex,
    }[kind](text)


def rows_of(columns: dict[str, Any], key: str) -> dict[Any, dict[str, Any]]:
    names = list(columns)
    values = [to_python(columns[name]) for name in names]
    return {
        row[key]: row
        for row in (dict(zip(names, v, strict=True)) for v in zip(*values, strict=True))
    }


async def test_a_latest_box_view_holds_the_publishers_rows_at_its_tick(deployment, follow) -> None:
    publisher, relay = deployment
    follower = await follow(
        relays=[relay.url], dataset="agents", view=["box", [200, 200], [450, 450]], rows=True
    )
    updates = await follower.until("three pushes", lambda u: len(u) >= 3)
    assert updates[0]["full"]
    last = updates[-1]
    async with open_reader(publisher.url) as reader:
        tick, columns = await reader.read("agents", BOX, last["tick"])
    assert tick == last["tick"]
    want = rows_of(columns, "id")
    got = {row["id"]: {k: untagged(v) for k, v in row.items()} for row in last["rows"]}
    assert got == want and len(got) > 10
    assert all(200 <= row["x"] <= 450 and 200 <= row["y"] <= 450 for row in got.values())


async def test_transforms_project_and_narrow_the_rows(deployment, follow) -> None:
    """A projection to ``x`` in ``float32``: the key and ``x`` only, each ``x`` the publisher's
    value as a float32; a transform naming a column the dataset lacks is refused."""
    publisher, relay = deployment
    box = ["box", [200, 200], [450, 450]]
    transform = {"columns": ["x"], "precision": "float32"}
    narrowed = await follow(
        relays=[relay.url], dataset="agents", view=box, rows=True, transform=transform
    )
    refused = await follow(
        relays=[relay.url], dataset="agents", view=box, transform={"columns": ["nope"]}
    )
    updates = await narrowed.until("two pushes", lambda u: len(u) >= 2)
    async with open_reader(publisher.url) as reader:
        _, columns = await reader.read("agents", BOX, updates[-1]["tick"])
    want = {row["id"]: row["x"] for row in rows_of(columns, "id").values()}
    got = {row["id"]: row for row in updates[-1]["rows"]}
    assert got.keys() == want.keys() and len(got) > 10
    assert all(row.keys() == {"id", "x"} for row in got.values())
    assert all(row["x"] == float(np.float32(want[key])) for key, row in got.items())
    await refused.process.wait()
    await refused.reading
    assert [(e["type"], e["code"]) for e in refused.lines] == [("error", "invalid_transform")]


async def test_sql_views_decode_timestamps_dates_decimals_bytes_and_nulls(
    deployment, follow
) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer:
        await producer.publish("bookings", rows=BOOKINGS)
    texts = [
        "SELECT * FROM bookings",
        "SELECT id, fare, booked FROM bookings WHERE fare IS NULL OR fare < 0",
    ]
    followers = [
        await follow(relays=[relay.url], dataset="bookings", view=["sql", text], rows=True)
        for text in texts
    ]
    async with open_reader(publisher.url) as reader:
        for text, follower in zip(texts, followers, strict=True):
            updates = await follower.until(
                f"{text}: the three bookings", lambda u: u and len(u[-1]["rows"]) >= 1
            )
            last = updates[-1]
            _, columns = await reader.read("bookings", sql(text), last["tick"])
            want = rows_of(columns, "id")  # the publisher reads whole rows: project them
            got = {r["id"]: {k: untagged(v) for k, v in r.items()} for r in last["rows"]}
            assert got == {k: {c: want[k][c] for c in got.get(k, {})} for k in want}, text
    everything = {r["id"]: r for r in followers[0].updates()[-1]["rows"]}
    assert {k: untagged(v) for k, v in everything[1].items()} == BOOKINGS[0]
    assert {k: untagged(v) for k, v in everything[2].items()} == BOOKINGS[1]  # typed NULLs
    assert {r["id"] for r in followers[1].updates()[-1]["rows"]} == {2, 3}


async def test_an_every_view_across_a_relay_restart_loses_nothing(
    deployment, follow, children: Children, tmp_path: Path
) -> None:
    """The client fails over to the restarted relay on the same port, resuming with its token:
    audited against the publisher's log, nothing lost, duplicated or reordered."""
    publisher, _ = deployment
    # a relay of its own, so that the module's relay serves the other tests undisturbed
    first = await children.start(
        "relay", ["--publisher", publisher.url, "--port", "0"], tmp_path / "relay-every-1.log"
    )
    port = int(first.url.rsplit(":", 1)[1])
    follower = await follow(
        relays=[first.url], dataset="agents", view=["box", [200, 200], [450, 450]], mode="every"
    )
    before = await follower.until("ten updates", lambda u: len(u) >= 10)
    await first.stop()
    second = await children.start(
        "relay",
        ["--publisher", publisher.url, "--port", str(port)],
        tmp_path / "relay-every-2.log",
    )
    try:
        target = before[-1]["seq"] + 5
        updates = await follower.until(
            f"seq {target} from the restarted relay",
            lambda u: u[-1]["seq"] >= target and u[-1]["failovers"] == 1,
            timeout=180,
        )
    finally:
        await second.stop()
    assert updates[-1]["failovers"] == 1
    with SqliteLog(tmp_path / "state" / "log.db") as stored:
        report = audit(
            updates_of(updates), BOX, key="id", index=("x", "y"), log=stored, dataset="agents"
        )
    assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), report.problems
    assert report.clean, report.problems
    assert report.restarts == updates[-1]["resyncs"]  # a full push only after an announced resync
    assert updates[-1]["gaps"] == 0


def _shown(text: str, orders: list[int], agents: int) -> bool:
    """Whether the page's state (``EXAMPLE_STATE``) shows ``orders`` and more than ``agents``."""
    state = json.loads(text)
    return bool(state) and state["orders"] == orders and state["agents"] > agents


class _Files(http.server.SimpleHTTPRequestHandler):
    extensions_map = {  # noqa: RUF012 - the base class's attribute, widened
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
    }

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test says what it fetched when it fails."""


@contextlib.contextmanager
def static_files(directory: Path) -> Iterator[str]:
    """``directory`` served over HTTP on a free port, as ``python3 -m http.server`` would."""
    handler = functools.partial(_Files, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_the_walkthrough_page_shows_a_map_and_a_sql_view(
    deployment, package: Path, follow, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Orders written by the TypeScript client through the relay (``Subscriber.publish``), then
    docs/typescript.md's page in headless Chromium: the map holds the agents, the table the
    orders the SQL view selects, their text as text."""
    from fanout.testing.browser import open_browser

    need("chromium")
    _, relay = deployment
    # the orders are written with the TypeScript client, through the relay
    writer = await follow(
        relays=[relay.url],
        publish={"dataset": "orders", "rows": ORDERS},
        dataset="orders",
        view=["sql", "SELECT * FROM orders"],
    )
    await writer.until("the orders written and served", lambda u: u and len(u[-1]["entered"]) == 3)
    assert [e["type"] for e in writer.lines[:2]] == ["published", "subscribed"]
    with static_files(package) as base:
        url = f"{base}/examples/?relay={relay.url}"
        async with open_browser(url, tmp_path_factory.mktemp("browser")) as page:
            state = await eventually(
                lambda: page.evaluate(EXAMPLE_STATE),
                lambda text: _shown(text, orders=[1, 2], agents=1000),
                timeout=120,
                every=0.5,
                what="the page's orders and agents",
            )
    shown = json.loads(state)
    assert shown["agents"] > 1000  # the whole world of 2,000 agents
    assert sorted(shown["cells"]) == sorted(["1", "ada", "120.5", "2", "<b>bob</b>", "300"])
