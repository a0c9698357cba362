"""The live viewer at a relay's ``/`` (``http/viewer``, on @fanout/client over the WebSocket
protocol) in headless Chromium, one dataset of each kind from one Spark publisher and relay: a
map of a region dataset holding the publisher's rows inside its view at its tick, and tables of
a SQL, a topic and a path dataset showing the rows their views select, typed cells as text.

A view typed into the page is held by a new subscription (a projection changes the columns), a
refused one is said in the page while the rows before stay, and the dataset picker lists the
relay's datasets and switches between a map and a table.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from fanout.client.publisher import open_producer, open_reader
from fanout.launch import Child, Children
from fanout.testing.deployment import publisher_and_relay
from fanout.testing.needs import need
from fanout.testing.wait import eventually
from fanout.views import Box

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

CONFIG = """
[spark.conf]
"spark.sql.shuffle.partitions" = 1  # four small datasets: their first micro-batches sooner

[datasets.agents]
source = { kind = "simulation", agents = 500 }

[datasets.orders]
key = "order_id"
index = "sql"
source = "ingest"
[datasets.orders.schema]
order_id = "long"
customer = "string"
amount = "double"
paid = "decimal(8,2)"
placed = "timestamp"

[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"

[datasets.objects]
key = "path"
schema = { path = "string", state = "string" }
index = "path"
source = "ingest"
"""
PLACED = datetime.datetime(2026, 11, 29, 4, 47, 25, 123456, tzinfo=datetime.UTC)
ORDERS = [
    {"order_id": 1, "customer": "ada", "amount": 120.5, "paid": decimal.Decimal("129.90"),
     "placed": PLACED},
    {"order_id": 2, "customer": "<b>bob</b>", "amount": 300.0, "paid": None, "placed": None},
    {"order_id": 3, "customer": "cy", "amount": 99.0, "paid": decimal.Decimal("-0.01"),
     "placed": PLACED},
]  # fmt: skip
SENSORS = [
    {"topic": "plant/1/temp", "value": 20.5},
    {"topic": "plant/2/temp", "value": 21.0},
    {"topic": "plant/1/rpm", "value": 900.0},
]
OBJECTS = [
    {"path": "/objects/door", "state": "open"},
    {"path": "/objects/lamp", "state": "on"},
    {"path": "/elsewhere/fan", "state": "off"},
]
#: Where the screenshots go (docs/img/viewer-*.png are copies).
ARTIFACTS = Path(os.environ.get("FANOUT_ARTIFACTS", "var/artifacts"))
#: What the page shows: its state (window.fanoutViewer) and its table as a user reads it.
PAGE = """JSON.stringify({
  error: fanoutViewer.error, view: fanoutViewer.servedView, tick: fanoutViewer.tick,
  datasets: [...document.querySelectorAll("#dataset option")].map((o) => o.textContent),
  map: !document.getElementById("map").hidden,
  rows: [...fanoutViewer.rows.values()].map((r) => [r.id, r.x, r.y]),
  head: [...document.querySelectorAll("#table thead th")].map((th) => th.textContent),
  table: [...document.querySelectorAll("#table tbody tr")]
    .filter((tr) => tr.className !== "left").map((tr) => [...tr.cells].map((td) => td.textContent)),
  status: document.getElementById("status").textContent,
})"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> tuple[Child, Child]:
    """The publisher, with the ingest datasets' rows written, and a relay."""
    publisher, relay = await publisher_and_relay(children, tmp_path, CONFIG)
    async with open_producer(publisher.url) as producer:
        for dataset, rows in (("orders", ORDERS), ("sensors", SENSORS), ("objects", OBJECTS)):
            await producer.publish(dataset, rows=rows)
    return publisher, relay


@pytest.fixture
def browser(deployment: tuple[Child, Child], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Open the relay's viewer at ``?query`` in headless Chromium (an async context manager)."""
    from fanout.testing.browser import open_browser

    need("chromium")
    base = deployment[1].url.replace("ws://", "http://")
    return lambda query: open_browser(f"{base}/?{query}", tmp_path_factory.mktemp("browser"))


async def shown(page: Any, done: Any, what: str) -> dict[str, Any]:
    """The page's state once ``done(state)`` holds (Spark serves ingested rows at its next
    micro-batch); an error the page shows fails at once."""

    async def state() -> dict[str, Any]:
        now: dict[str, Any] = json.loads(await page.evaluate(PAGE))
        assert now["error"] is None, now["error"]
        return now

    return await eventually(state, done, timeout=90, every=0.3, what=what)


async def test_a_region_dataset_is_a_map_of_the_publishers_rows_in_the_view(
    deployment, browser
) -> None:
    publisher, _ = deployment
    async with browser("dataset=agents&view=box:200,200,500,500&rate=5") as page:
        state = await shown(page, lambda s: s["rows"] and s["view"], "agents on the map")
        assert state["map"] and state["datasets"] == [
            "agents (region)", "orders (sql)", "sensors (topic)", "objects (path)"
        ]  # fmt: skip
        lo_hi = [float(v) for v in state["view"].removeprefix("box:").split(",")]
        async with open_reader(publisher.url) as reader:
            _, truth = await reader.read("agents", Box(lo_hi[:2], lo_hi[2:]), state["tick"])
        want = {int(i): (x, y) for i, x, y in zip(truth["id"], truth["x"], truth["y"], strict=True)}
        assert {i: (x, y) for i, x, y in state["rows"]} == want and want
        assert lo_hi[0] <= 200 and lo_hi[2] >= 500  # the box asked for, in the map's shape
        await page.screenshot(ARTIFACTS / "viewer-map.png")


async def test_a_sql_dataset_is_a_table_of_the_views_rows_and_columns(deployment, browser) -> None:
    """Decimals, timestamps and NULLs as text, markup as text; a projection typed in changes
    the columns; a query that does not parse is refused (a ``protocol`` error: the relay cannot
    decode the view, docs/protocol.md) and said in the page, the rows before kept."""
    async with browser("dataset=orders&view=SELECT * FROM orders WHERE amount > 100") as page:
        state = await shown(page, lambda s: len(s["table"]) == 2, "the orders over 100")
        assert not state["map"]
        assert state["head"] == ["order_id", "customer", "amount", "paid", "placed"]
        assert state["table"] == [
            ["1", "ada", "120.5", "129.90", "2026-11-29T04:47:25.123456Z"],
            ["2", "<b>bob</b>", "300", "null", "null"],
        ]
        await page.screenshot(ARTIFACTS / "viewer-sql.png")
        await type_view(page, "SELECT order_id, paid FROM orders WHERE paid < 100")
        state = await shown(page, lambda s: s["head"] == ["order_id", "paid"], "the projection")
        assert state["table"] == [["3", "-0.01"]]
        await type_view(page, "SELECT FROM WHERE")
        refused = await eventually(lambda: page.evaluate(PAGE), lambda s: json.loads(s)["error"])
        assert "invalid SQL" in json.loads(refused)["status"]
        assert json.loads(refused)["table"] == [["3", "-0.01"]]


async def test_a_topic_dataset_is_a_table_of_the_filters_rows(browser) -> None:
    async with browser("dataset=sensors&view=plant/%2B/temp") as page:
        state = await shown(page, lambda s: len(s["table"]) == 2, "the two temperatures")
        assert state["head"] == ["topic", "value"]
        assert state["table"] == [["plant/1/temp", "20.5"], ["plant/2/temp", "21"]]


async def test_a_path_dataset_picked_from_the_map_is_a_table_of_its_objects(browser) -> None:
    """The picker switches a map to a path dataset: its default view, every object of its
    directory (``/objects/.all``)."""
    async with browser("dataset=agents") as page:
        await shown(page, lambda s: s["map"] and s["rows"], "the map")
        await page.evaluate(
            "(() => { const s = document.getElementById('dataset'); s.value = 'objects';"
            " s.dispatchEvent(new Event('change')); })()"
        )
        state = await shown(page, lambda s: len(s["table"]) == 2, "the objects")
        assert not state["map"] and state["view"] == "/objects/.all"
        assert state["table"] == [["/objects/door", "open"], ["/objects/lamp", "on"]]


async def type_view(page: Any, text: str) -> None:
    """Type ``text`` as the view and press *subscribe*, as a user does."""
    await page.evaluate(
        f"(() => {{ document.getElementById('view').value = {json.dumps(text)};"
        " document.querySelector('#viewform button').click(); })()"
    )
