"""A real relay serving SQL and topic views of a real publisher's datasets (issue 4, item 8):
subscribers get row deltas whose rows, at every push's tick, are the publisher's."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from fanout.client import LiveView, SubscriptionError, connect
from fanout.client.publisher import PublisherClient, open_producer, open_reader
from fanout.client.subscriber import Update
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.deployment import publisher_and_relay
from fanout.views import View
from fanout.views.sql import parse as sql
from fanout.views.topic import parse as topic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

CONFIG = """
[datasets.orders]
key = "order_id"
schema = { order_id = "long", customer = "string", amount = "double" }
index = "sql"
source = "ingest"

[datasets.customers]
key = "name"
schema = { name = "string", tier = "long" }
index = "sql"
source = "ingest"

[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> tuple[Child, Child]:
    """The publisher and a relay, stopped with the module's scope."""
    return await publisher_and_relay(children, tmp_path, CONFIG)


def held(view: LiveView) -> dict[Any, dict[str, Any]]:
    return {key: dict(row) for key, row in view.rows.items()}


def as_rows(columns: dict[str, Any], key: str) -> dict[Any, dict[str, Any]]:
    names = list(columns)
    rows = zip(*(columns[name].tolist() for name in names), strict=True)
    return {row[key]: row for row in (dict(zip(names, values, strict=True)) for values in rows)}


async def matches_publisher(
    reader: PublisherClient, view: LiveView, dataset: str, query: View, done: Callable[[dict], bool]
) -> None:
    """Wait until ``done(rows)``; every update on the way holds the publisher's rows at its tick."""
    async with asyncio.timeout(90):
        while True:
            seen = view.updates
            if seen:
                rows, tick = held(view), view.tick
                _, columns = await reader.read(dataset, query, tick)
                assert rows == as_rows(columns, view.key), f"at tick {tick}"
                if done(rows):
                    return
            if view.updates == seen:  # none arrived while the state was read: wait for one
                await view.wait_updates()


async def test_a_sql_view_gets_the_publishers_rows_as_deltas(deployment) -> None:
    publisher, relay = deployment
    query = sql("SELECT * FROM orders WHERE amount > 10 AND customer IN ('ada', 'bob')")
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish(
            "orders",
            rows=[
                {"order_id": 1, "customer": "ada", "amount": 50.0},
                {"order_id": 2, "customer": "bob", "amount": 5.0},
                {"order_id": 3, "customer": "cy", "amount": 70.0},
            ],
        )
        async with connect(relay.url) as subscriber:
            # confirmed rows only: each update is checked against the publisher at its tick
            # (producer writes reach a latest view before the tick that carries them)
            view = await subscriber.subscribe(query, dataset="orders", rate=50.0, confirmed=True)
            assert view.key == "order_id"
            await matches_publisher(reader, view, "orders", query, lambda rows: 1 in rows)
            await producer.publish(
                "orders",
                rows=[{"order_id": 2, "customer": "bob", "amount": 20.0}],
                deletes=[1],
            )
            await matches_publisher(reader, view, "orders", query, lambda rows: set(rows) == {2})
            assert view.rows[2] == {"order_id": 2, "customer": "bob", "amount": 20.0}


async def test_fanout_subscribe_prints_a_sql_views_rows(deployment) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer:
        await producer.publish("orders", rows=[{"order_id": 77, "customer": "dee", "amount": 77.5}])
    command = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "fanout", "subscribe", "--relay", relay.url),
        *("--dataset", "orders", "--kind", "sql", "--count", "1", "--json"),
        *("--view", "SELECT order_id, amount FROM orders WHERE customer = 'dee'"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 90)
    assert command.returncode == 0, err.decode()
    (line,) = out.decode().splitlines()
    update = json.loads(line)
    assert update["full"] and update["entered"] == [{"order_id": 77, "amount": 77.5}]


async def test_fanout_subscribe_takes_the_views_language_from_the_dataset(deployment) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer:
        await producer.publish("sensors", rows=[{"topic": "hall/9/temp", "value": 9.5}])
    command = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "fanout", "subscribe", "--relay", relay.url),
        *("--dataset", "sensors", "--view", "hall/+/temp", "--count", "1", "--json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 90)
    assert command.returncode == 0, err.decode()
    (line,) = out.decode().splitlines()
    update = json.loads(line)
    assert update["full"] and update["entered"] == [{"topic": "hall/9/temp", "value": 9.5}]


async def test_a_join_is_run_on_the_relay(deployment) -> None:
    publisher, relay = deployment
    text = (
        "SELECT o.order_id, o.amount, c.tier FROM orders o JOIN customers c ON o.customer = c.name"
    )
    async with open_producer(publisher.url) as producer, connect(relay.url) as subscriber:
        await producer.publish("customers", rows=[{"name": "ada", "tier": 1}])
        await producer.publish("orders", rows=[{"order_id": 10, "customer": "ada", "amount": 1.0}])
        view = await subscriber.subscribe(sql(text), dataset="orders", rate=50.0)
        assert view.key == "_key"

        def tiers() -> dict[int, tuple[float, int]]:
            return {row["order_id"]: (row["amount"], row["tier"]) for row in view.rows.values()}

        async with asyncio.timeout(90):
            while tiers().get(10) != (1.0, 1):
                await view.wait_updates()
            await producer.publish("customers", rows=[{"name": "ada", "tier": 2}])
            while tiers().get(10) != (1.0, 2):
                await view.wait_updates()


async def test_a_topic_filter_gets_the_matching_retained_messages(deployment) -> None:
    publisher, relay = deployment
    view_filter = topic("plant/+/temp")
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish(
            "sensors",
            rows=[
                {"topic": "plant/1/temp", "value": 20.5},
                {"topic": "plant/2/temp", "value": 21.0},
                {"topic": "plant/1/rpm", "value": 900.0},
            ],
        )
        async with connect(relay.url) as subscriber:
            # Confirmed rows only: a producer's write is shown to a ``latest`` view before any
            # state of the publisher holds it (the live path), which this test does not check.
            view = await subscriber.subscribe(
                view_filter, dataset="sensors", rate=50.0, confirmed=True
            )
            await matches_publisher(
                reader, view, "sensors", view_filter, lambda rows: len(rows) == 2
            )
            await producer.publish(
                "sensors", rows=[{"topic": "plant/3/temp", "value": 3.0}], deletes=["plant/1/temp"]
            )
            await matches_publisher(
                reader,
                view,
                "sensors",
                view_filter,
                lambda rows: set(rows) == {"plant/2/temp", "plant/3/temp"},
            )


async def collect(view: LiveView, into: list[Update], done: Callable[[], bool]) -> None:
    """Append ``view``'s updates to ``into`` until ``done()``."""
    async with asyncio.timeout(90):
        async for update in view:
            into.append(update)
            if done():
                return


async def test_an_every_topic_subscription_gets_each_seq_once_and_resumes(deployment, tmp_path):
    """Mode every over a topic filter (US 7,487,246's durable subscription): every seq, in order,
    exactly once, across a disconnection with messages published meanwhile; audited against the
    publisher's log."""
    publisher, relay = deployment
    view_filter = topic("line/+/count")
    retained: dict[str, float] = {}
    updates: list[Update] = []

    def values(view: LiveView) -> dict[str, float]:
        return {key: row["value"] for key, row in view.rows.items()}

    async with open_producer(publisher.url) as producer:

        async def send(number: int) -> None:
            name = f"line/{number % 3}/count"
            rows = [
                {"topic": name, "value": float(number)},
                {"topic": "yard/1/count", "value": 1.0},
            ]
            await producer.publish("sensors", rows=rows)
            retained[name] = float(number)

        await send(0)
        async with connect(relay.url) as subscriber:
            first = await subscriber.subscribe(view_filter, dataset="sensors", mode="every")
            for number in range(1, 6):
                await send(number)
            await collect(first, updates, lambda: values(first) == retained)
        for number in range(6, 11):  # while the subscriber is away
            await send(number)
        await producer.publish("sensors", deletes=["line/0/count"])
        del retained["line/0/count"]
        async with connect(relay.url) as subscriber:
            view = await subscriber.subscribe(
                view_filter, dataset="sensors", mode="every", resume=first
            )
            await collect(view, updates, lambda: values(view) == retained)
    assert "yard/1/count" not in view.rows
    assert (view.gaps, view.resyncs) == (0, 0)
    with SqliteLog(tmp_path / "state" / "log.db") as stored:
        report = audit(
            updates, view_filter, key="topic", index=("topic",), log=stored, dataset="sensors"
        )
    assert report.clean, report.problems
    assert report.restarts == 0
    assert report.held == set(view.rows)
    assert report.delivered == report.last - report.first + 1  # every seq, once


async def test_an_every_sql_subscription_gets_each_seq_of_its_projected_rows(deployment, tmp_path):
    """Mode every over a row-by-row SQL view: the query's projected, computed rows, one update
    per seq, in order; rows that stop matching or are deleted leave."""
    publisher, relay = deployment
    query = sql("SELECT order_id, amount * 2 AS doubled FROM orders WHERE customer = 'eve'")
    expected: dict[int, float] = {}
    updates: list[Update] = []
    async with open_producer(publisher.url) as producer, connect(relay.url) as subscriber:
        view = await subscriber.subscribe(query, dataset="orders", mode="every")
        assert view.key == "order_id"
        for number in range(100, 106):
            customer = "eve" if number % 2 else "zed"
            row = {"order_id": number, "customer": customer, "amount": float(number)}
            await producer.publish("orders", rows=[row])
            if customer == "eve":
                expected[number] = 2.0 * number
        await producer.publish(
            "orders", rows=[{"order_id": 101, "customer": "zed", "amount": 1.0}], deletes=[103]
        )
        expected.pop(101)
        expected.pop(103)

        def doubled() -> dict[int, float]:
            return {key: row["doubled"] for key, row in view.rows.items()}

        await collect(view, updates, lambda: doubled() == expected)
    seqs = [update.seq for update in updates]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # every seq, once, in order
    assert view.gaps == 0
    assert all(set(row) == {"order_id", "doubled"} for row in view.rows.values())
    with SqliteLog(tmp_path / "state" / "log.db") as stored:
        report = audit(updates, query, key="order_id", index=(), log=stored, dataset="orders")
    assert report.clean, report.problems
    assert report.held == set(view.rows)


def carries(update: Update, topic_name: str) -> bool:
    """Whether ``update`` sends the row of ``topic_name`` (entered or updated)."""
    sent = [rows["topic"].tolist() for rows in (update.entered, update.updated) if rows]
    return any(topic_name in topics for topics in sent)


async def test_a_write_through_the_relay_is_shown_at_once_and_not_again_when_confirmed(
    deployment,
) -> None:
    """Issue 40: a write made through the relay reaches a ``latest`` view before Spark's
    micro-batch carries it (a ``confirmed`` view of the same filter does not have it yet), marked
    provisional; the micro-batch then confirms it and the view is not sent the row again."""
    _, relay = deployment
    before = await asyncio.to_thread(scrape, relay.url)  # earlier tests' writes were shown too
    async with connect(relay.url) as subscriber, connect(relay.url) as writer:
        live = await subscriber.subscribe(topic("live/#"), dataset="sensors", rate=100.0)
        confirmed = await subscriber.subscribe(
            topic("live/#"), dataset="sensors", rate=100.0, confirmed=True
        )
        async with asyncio.timeout(90):  # a loaded machine's micro-batch
            await anext(aiter(live))  # the first, full pushes: both views are served
            await anext(aiter(confirmed))
            written = asyncio.create_task(
                writer.publish("sensors", [{"topic": "live/1", "value": 1.5}])
            )
            shown = await anext(aiter(live))
            assert shown.provisional and carries(shown, "live/1")
            assert held(live) == {"live/1": {"topic": "live/1", "value": 1.5}}
            assert held(confirmed) == {}  # no micro-batch has carried it yet
            await written
            async for update in confirmed:
                if carries(update, "live/1"):
                    break
            later: list[Update] = []
            async for update in live:  # its push of the state that confirmed the write
                later.append(update)
                if live.tick >= confirmed.tick:
                    break
    assert not any(carries(update, "live/1") for update in later)
    assert not later[-1].provisional
    assert held(live) == held(confirmed) == {"live/1": {"topic": "live/1", "value": 1.5}}
    counts = await asyncio.to_thread(scrape, relay.url)
    confirmed_total, corrected = (
        "fanout_relay_live_confirmed_total",
        "fanout_relay_live_corrected_total",
    )
    assert (
        counts[confirmed_total] - before.get(confirmed_total, 0) == 1
    )  # by a tick, not a deadline
    assert counts["fanout_relay_live_pending"] == 0
    assert counts[corrected] - before.get(corrected, 0) == 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def other_relay(deployment, children: Children, tmp_path: Path) -> Child:
    """A second relay on the module's publisher."""
    publisher, _ = deployment
    return await children.start(
        "relay",
        ["--publisher", publisher.url, "--port", "0", "--log-level", "info"],
        tmp_path / "other-relay.log",
    )


async def test_a_write_through_one_relay_is_shown_at_once_on_another(
    deployment, other_relay
) -> None:
    """Issue 40: a write made through relay A reaches a ``latest`` view on relay B before Spark's
    micro-batch carries it (B's ``confirmed`` view lacks it), marked provisional: the publisher
    passed it on once durable (``Written``); B's state of its tick confirms it, not sent again.
    A write the publisher refuses is passed to no relay."""
    publisher, relay = deployment
    async with connect(other_relay.url) as subscriber, connect(relay.url) as writer:
        live = await subscriber.subscribe(topic("across/#"), dataset="sensors", rate=100.0)
        confirmed = await subscriber.subscribe(
            topic("across/#"), dataset="sensors", rate=100.0, confirmed=True
        )
        async with asyncio.timeout(90):  # a loaded machine's micro-batch
            await anext(aiter(live))  # the first, full pushes: B holds the filter upstream
            await anext(aiter(confirmed))
            before = await asyncio.to_thread(scrape, publisher.url)
            with pytest.raises(SubscriptionError):  # refused by the publisher: not passed on
                await writer.publish("sensors", [{"topic": "across/0", "value": "not a number"}])
            written = asyncio.create_task(
                writer.publish("sensors", [{"topic": "across/1", "value": 2.5}])
            )
            shown = await anext(aiter(live))
            assert shown.provisional and carries(shown, "across/1")
            assert held(live) == {"across/1": {"topic": "across/1", "value": 2.5}}
            assert held(confirmed) == {}  # no micro-batch has carried it yet
            await written
            async for update in confirmed:
                if carries(update, "across/1"):
                    break
            later: list[Update] = []
            async for update in live:
                later.append(update)
                if live.tick >= confirmed.tick:
                    break
    assert not any(carries(update, "across/1") for update in later)
    assert held(live) == held(confirmed) == {"across/1": {"topic": "across/1", "value": 2.5}}
    counts = await asyncio.to_thread(scrape, other_relay.url)
    assert counts["fanout_relay_live_passed_total"] == 1
    after = await asyncio.to_thread(scrape, publisher.url)
    passed = "fanout_publisher_writes_passed_total"
    assert after[passed] - before[passed] == 1  # to B alone; the refused write to none
    assert counts["fanout_relay_live_confirmed_total"] == 1
    assert counts["fanout_relay_live_pending"] == 0
    assert counts["fanout_relay_live_corrected_total"] == 0


async def test_a_write_through_the_relay_reaches_a_sql_view_at_once(deployment) -> None:
    """Issue 40: a SQL view the relay judges row by row (one table, a WHERE and an expression)
    is shown a write through the relay at once, as its query shows it, marked provisional; a
    ``confirmed`` view of the same query gets it by the micro-batch, the live one not again."""
    _, relay = deployment
    query = sql("SELECT order_id, amount * 2 AS doubled FROM orders WHERE customer = 'live-sql'")
    rows = [
        {"order_id": 900, "customer": "live-sql", "amount": 4.0},
        {"order_id": 901, "customer": "amy", "amount": 5.0},  # not in the view
    ]
    sends = lambda update: [  # noqa: E731
        key
        for part in (update.entered, update.updated)
        if part
        for key in part["order_id"].tolist()
    ]
    async with connect(relay.url) as subscriber, connect(relay.url) as writer:
        live = await subscriber.subscribe(query, dataset="orders", rate=100.0)
        confirmed = await subscriber.subscribe(query, dataset="orders", rate=100.0, confirmed=True)
        async with asyncio.timeout(90):  # a loaded machine's micro-batch
            await anext(aiter(live))
            await anext(aiter(confirmed))
            written = asyncio.create_task(writer.publish("orders", rows))
            shown = await anext(aiter(live))
            assert shown.provisional and sends(shown) == [900]
            assert held(live) == {900: {"order_id": 900, "doubled": 8.0}}
            assert held(confirmed) == {}  # no micro-batch has carried it yet
            await written
            async for update in confirmed:
                if 900 in sends(update):
                    break
            later: list[Update] = []
            async for update in live:
                later.append(update)
                if live.tick >= confirmed.tick:
                    break
    assert not any(900 in sends(update) for update in later)
    assert held(live) == held(confirmed) == {900: {"order_id": 900, "doubled": 8.0}}
