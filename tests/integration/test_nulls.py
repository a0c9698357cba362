"""NULL end to end (issue 29): rows with NULL in every column type, published through the
producer API to a real Spark publisher, served by a real relay; every SQL view's rows, at every
push's tick, are DuckDB's answer to the view on the publisher's rows at that tick (the oracle
of ``fanout.testing.audit``, not the relay's store). NaN stays a number."""

from __future__ import annotations

import asyncio
import datetime
import json
from decimal import Decimal
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
from fanout.testing.audit import audit, duckdb_answer, same_rows
from fanout.testing.deployment import publisher_and_relay
from fanout.testing.wait import eventually
from fanout.views.sql import parse as sql
from fanout.wire.columns import to_python

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

CONFIG = """
[datasets.flights]
key = "id"
index = "sql"
source = "ingest"

[datasets.flights.schema]
id = "long"
carrier = "string"
dep_delay = "double"
arr_delay = "long"
seats = "int"
cancelled = "boolean"

[datasets.bookings]
key = "id"
schema = {{ id = "long", booked = "timestamp", day = "date", fare = "decimal(8,2)", seat = "int" }}
index = "sql"
source = "ingest"

[datasets.trips]
key = "id"
index = "sql"
source = {{ kind = "files", path = "{trips}", format = "json" }}

[datasets.trips.schema]
id = "long"
started = "timestamp"
km = "double"
stops = "long"
fare = "decimal(6,2)"
label = "bytes"

[datasets.carriers]
key = "code"
schema = {{ code = "string", name = "string", rank = "long", data = "bytes" }}
index = "sql"
source = "ingest"
"""

NAN = float("nan")
FLIGHTS = [
    {
        "id": 1,
        "carrier": "AA",
        "dep_delay": 75.0,
        "arr_delay": 80,
        "seats": 100,
        "cancelled": False,
    },
    {
        "id": 2,
        "carrier": "BA",
        "dep_delay": None,
        "arr_delay": None,
        "seats": None,
        "cancelled": True,
    },
    {"id": 3, "carrier": None, "dep_delay": 130.0, "arr_delay": 5, "seats": 50, "cancelled": None},
    {"id": 4, "carrier": "AA", "dep_delay": NAN, "arr_delay": 150, "seats": 70, "cancelled": False},
    {
        "id": 5,
        "carrier": "CX",
        "dep_delay": -3.0,
        "arr_delay": None,
        "seats": 0,
        "cancelled": False,
    },
    {
        "id": 6,
        "carrier": "BA",
        "dep_delay": 20.0,
        "arr_delay": 10,
        "seats": None,
        "cancelled": None,
    },
]
CARRIERS = [
    {"code": "AA", "name": "American", "rank": 2, "data": b"\x01"},
    {"code": "BA", "name": None, "rank": None, "data": None},
]

VIEWS = [
    "SELECT * FROM flights WHERE dep_delay IS NULL",
    "SELECT * FROM flights WHERE dep_delay > 60",
    "SELECT * FROM flights WHERE dep_delay > 120 OR arr_delay > 120",
    "SELECT * FROM flights WHERE dep_delay IS NOT NULL AND seats IS NULL",
    "SELECT * FROM flights WHERE carrier IN ('AA', 'CX')",
    "SELECT * FROM flights WHERE NOT (arr_delay BETWEEN 0 AND 60)",
    "SELECT * FROM flights WHERE carrier LIKE 'B%' OR cancelled",
    "SELECT * FROM flights WHERE cancelled IS NULL",
    "SELECT id, seats FROM flights WHERE seats < 80",
]
JOIN = (
    "SELECT f.id, f.dep_delay, c.name, c.rank FROM flights f JOIN carriers c ON f.carrier = c.code"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> tuple[Child, Child]:
    """The publisher and a relay, stopped with the module's scope."""
    (tmp_path / "trips").mkdir()
    return await publisher_and_relay(children, tmp_path, CONFIG.format(trips=tmp_path / "trips"))


async def table_at(reader: PublisherClient, dataset: str, tick: int) -> dict[str, Any]:
    """The publisher's whole table ``dataset`` at ``tick`` (NULL masked)."""
    _, columns = await reader.read(dataset, sql(f"SELECT * FROM {dataset}"), tick)
    return columns


async def published(reader: PublisherClient, dataset: str, rows: int) -> None:
    """Wait until the publisher's state of ``dataset`` holds ``rows`` rows. (Subscribing before
    that, a first push may carry the rows stamped with the tick before them: the publisher cuts
    a new primitive's snapshot from its mirror, which may be a micro-batch ahead of the ticks it
    can be read back at.)"""
    async with asyncio.timeout(120):
        while True:
            try:
                columns = await table_at(reader, dataset, -1)
            except SubscriptionError as exc:  # no micro-batch yet
                assert exc.code == "timeout", exc
                columns = {}
            if columns and len(next(iter(columns.values()))) == rows:
                return
            await asyncio.sleep(0.2)


async def agrees_at_every_push(
    reader: PublisherClient,
    view: LiveView,
    text: str,
    final: list[tuple[Any, ...]] | None,
    dataset: str = "flights",
) -> None:
    """Every update's rows are DuckDB's answer at its tick, until the answer is ``final``'s
    (None: until one update was checked)."""
    async with asyncio.timeout(120):
        while True:
            seen = view.updates
            if seen:
                # The rows and their tick are taken together: the view may take a later push
                # while the publisher is asked for the table at this tick.
                tick, got = view.tick, list(view.rows.values())
                names, want = duckdb_answer(text, {dataset: await table_at(reader, dataset, tick)})
                assert same_rows(got, names, want), f"{text} at tick {tick}: {got} != {want}"
                if final is None or same_rows(got, names, final):
                    return
            if view.updates == seen:
                await view.wait_updates()


async def test_sql_views_over_nulls_are_duckdbs_answers(deployment) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish("flights", rows=FLIGHTS)
        await published(reader, "flights", len(FLIGHTS))
        async with connect(relay.url) as subscriber:
            views = [
                await subscriber.subscribe(sql(text), dataset="flights", rate=50.0, confirmed=True)
                for text in VIEWS
            ]
            for text, view in zip(VIEWS, views, strict=True):
                await agrees_at_every_push(reader, view, text, None)
            # NULLs become values, values become NULL, a row goes
            changed = [
                {**FLIGHTS[1], "dep_delay": 61.0, "seats": 7},
                {**FLIGHTS[0], "dep_delay": None, "carrier": None, "cancelled": None},
            ]
            await producer.publish("flights", rows=changed, deletes=[5])
            final_rows = [changed[1], changed[0], FLIGHTS[2], FLIGHTS[3], FLIGHTS[5]]
            final_table = {name: [row[name] for row in final_rows] for name in FLIGHTS[0]}
            for text, view in zip(VIEWS, views, strict=True):
                _, final = duckdb_answer(text, {"flights": final_table})
                await agrees_at_every_push(reader, view, text, final)
    null_rows = views[0].rows
    assert set(null_rows) == {1}  # dep_delay IS NULL: not the NaN row
    assert null_rows[1]["carrier"] is None and null_rows[1]["cancelled"] is None
    # NULL > 60 is unknown; NaN > 60 holds in DuckDB (NaN is the largest number)
    assert set(views[1].rows) == {2, 3, 4}
    assert views[8].rows[2] == {"id": 2, "seats": 7}


async def test_a_join_with_null_keys_and_values(deployment) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish("carriers", rows=CARRIERS)
        await producer.publish("flights", rows=FLIGHTS[2:4])
        async with connect(relay.url) as subscriber:
            view = await subscriber.subscribe(sql(JOIN), dataset="flights", rate=50.0)
            async with asyncio.timeout(120):
                while True:
                    tables = {
                        "flights": await table_at(reader, "flights", -1),
                        "carriers": await table_at(reader, "carriers", -1),
                    }
                    names, want = duckdb_answer(JOIN, tables)
                    if view.updates and same_rows(view.rows.values(), names, want):
                        break
                    await asyncio.sleep(0.3)
    rows = {row["id"]: row for row in view.rows.values()}
    assert 3 not in rows  # a NULL join key joins nothing
    assert rows[4]["name"] == "American" and rows[4]["rank"] == 2


UTC = datetime.UTC
BOOKINGS = [
    {
        "id": 1,
        "booked": datetime.datetime(
            2024, 3, 1, 12, 0, 0, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
        ),
        "day": datetime.date(2024, 3, 1),
        "fare": Decimal("120.50"),
        "seat": 7,
    },
    {"id": 2, "booked": None, "day": None, "fare": None, "seat": None},
    {
        "id": 3,
        "booked": datetime.datetime(2024, 3, 2, tzinfo=UTC),
        "day": datetime.date(2024, 3, 2),
        "fare": Decimal("999999.99"),
        "seat": None,
    },
]


async def test_producers_publish_timestamps_dates_decimals_and_nulls(deployment) -> None:
    publisher, relay = deployment
    texts = [
        "SELECT * FROM bookings WHERE fare > 100",
        "SELECT * FROM bookings WHERE booked IS NULL OR seat IS NULL",
        "SELECT * FROM bookings WHERE day = DATE '2024-03-01'",
        "SELECT id, booked FROM bookings WHERE booked < TIMESTAMPTZ '2024-03-01 12:00:00+00'",
    ]
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish("bookings", rows=BOOKINGS)
        await published(reader, "bookings", len(BOOKINGS))
        async with connect(relay.url) as subscriber:
            views = [
                await subscriber.subscribe(sql(text), dataset="bookings", rate=50.0, confirmed=True)
                for text in texts
            ]
            for text, view in zip(texts, views, strict=True):
                await agrees_at_every_push(reader, view, text, None, "bookings")
            # bad input: refused with the column named, and nothing of that publish applied
            bad = [
                (
                    {"booked": datetime.datetime(2024, 3, 1)},
                    "column 'booked' is timestamp",
                ),  # naive
                ({"booked": "2024-03-01T00:00:00Z"}, "column 'booked' is timestamp"),
                ({"fare": Decimal("1234567.00")}, r"column 'fare' is decimal(8,2)"),
                ({"fare": Decimal("1.001")}, r"column 'fare' is decimal(8,2)"),
                ({"day": "yesterday"}, "column 'day' is date"),
            ]
            for values, message in bad:
                with pytest.raises(SubscriptionError) as refused:
                    await producer.publish(
                        "bookings", rows=[{**BOOKINGS[1], "id": 9}, {**BOOKINGS[0], **values}]
                    )
                assert refused.value.code == "bad_request"
                assert message in str(refused.value), str(refused.value)
            await producer.publish("bookings", rows=[{**BOOKINGS[1], "id": 10}])
            await agrees_at_every_push(reader, views[1], texts[1], None, "bookings")
            await eventually_has(views[1], 10)
    rows = views[0].rows
    assert set(rows) == {1, 3}
    assert rows[1]["booked"] == datetime.datetime(2024, 3, 1, 11, 0, 0, 5, tzinfo=UTC)
    assert rows[1]["day"] == datetime.date(2024, 3, 1)
    assert rows[3]["fare"] == Decimal("999999.99") and isinstance(rows[3]["fare"], Decimal)
    assert 9 not in views[1].rows  # nothing of a refused publish was applied
    assert views[1].rows[2] == {"id": 2, "booked": None, "day": None, "fare": None, "seat": None}


async def eventually_has(view: LiveView, key: object) -> None:
    async with asyncio.timeout(120):
        while key not in view.rows:
            await view.wait_updates()


async def test_files_with_nulls_and_timestamps(deployment, tmp_path: Path) -> None:
    publisher, relay = deployment
    lines = [
        {"id": 1, "started": "2024-03-01T10:00:00.000001Z", "km": 3.5, "stops": 2, "fare": 12.5},
        {"id": 2, "started": None, "km": None, "stops": None, "fare": None},
        {"id": 3, "started": "2024-03-01T12:00:00+02:00", "km": 80.0, "fare": 1.25},  # no stops
    ]
    (tmp_path / "trips" / "a.json").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    texts = [
        "SELECT * FROM trips WHERE stops IS NULL",
        "SELECT * FROM trips WHERE km > 10 OR started IS NULL",
        "SELECT * FROM trips WHERE fare < 10",
    ]
    async with open_reader(publisher.url) as reader, connect(relay.url) as subscriber:
        await published(reader, "trips", len(lines))
        views = [
            await subscriber.subscribe(sql(text), dataset="trips", rate=50.0) for text in texts
        ]
        for text, view in zip(texts, views, strict=True):
            await agrees_at_every_push(reader, view, text, None, "trips")
            async with asyncio.timeout(120):
                while not view.rows:
                    await view.wait_updates()
            await agrees_at_every_push(reader, view, text, None, "trips")
    assert set(views[0].rows) == {2, 3}
    assert views[0].rows[3]["started"] == datetime.datetime(2024, 3, 1, 10, tzinfo=UTC)
    assert views[2].rows[3]["fare"] == Decimal("1.25")
    assert views[1].rows[2] == {
        "id": 2,
        "started": None,
        "km": None,
        "stops": None,
        "fare": None,
        "label": None,
    }


BLOBS = [  # carriers of their own (codes k1-k5), with bytes
    {"code": "k1", "name": "a", "rank": 1, "data": b"\x00\xff"},
    {"code": "k2", "name": None, "rank": None, "data": None},
    {"code": "k3", "name": "b", "rank": 3, "data": b"ab\x00"},  # a trailing NUL is a byte
    {"code": "k4", "name": "c", "rank": 4, "data": b""},
    {"code": "k5", "name": None, "rank": 5, "data": b"ab"},
]
BLOB_VIEWS = [
    "SELECT * FROM carriers WHERE code LIKE 'k%' AND data IS NULL",
    "SELECT * FROM carriers WHERE data = '\\x00\\xFF'::BLOB",
    "SELECT * FROM carriers WHERE code LIKE 'k%' AND (data = 'ab' OR name = 'c')",
    "SELECT code, data FROM carriers WHERE code LIKE 'k%' AND length(data) > 1",
]
EVERY = sql("SELECT code, data FROM carriers WHERE code LIKE 'k%' AND octet_length(data) > 1")


def oracle_text(text: str) -> str:
    """A view as DuckDB runs it on its own: the relay takes ``length(b)`` of bytes as
    PostgreSQL does, which DuckDB spells ``octet_length``."""
    return text.replace("length(", "octet_length(")


async def test_producers_publish_bytes_and_sql_views_select_them(deployment, tmp_path) -> None:
    publisher, relay = deployment
    mine = {row["code"] for row in BLOBS}
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish("carriers", rows=BLOBS)
        async with asyncio.timeout(120):
            while True:
                try:
                    held = set((await table_at(reader, "carriers", -1)).get("code", []))
                except SubscriptionError as exc:  # no micro-batch yet
                    assert exc.code == "timeout", exc
                    held = set()
                if mine <= held:
                    break
                await asyncio.sleep(0.2)
        async with connect(relay.url) as subscriber:
            # Every primitive is acquired, its snapshot applied, before the rows change: a
            # snapshot cut meanwhile may be a micro-batch ahead of the tick it is stamped with
            # (the publisher's mirror; seen here as a push at the tick before a change holding
            # the change).
            every = await subscriber.subscribe(EVERY, dataset="carriers", mode="every")
            views = [
                await subscriber.subscribe(sql(text), dataset="carriers", rate=50.0, confirmed=True)
                for text in BLOB_VIEWS
            ]
            for text, view in zip(BLOB_VIEWS, views, strict=True):
                await agrees_at_every_push(reader, view, oracle_text(text), None, "carriers")
            async with asyncio.timeout(120):
                while not every.updates:  # its first view: its snapshot applied
                    await every.wait_updates()
            with pytest.raises(SubscriptionError, match="column 'data' is bytes, not 'text'"):
                await producer.publish(
                    "carriers", rows=[{**BLOBS[1], "code": "k9"}, {**BLOBS[0], "data": "text"}]
                )
            changed = [{**BLOBS[1], "data": b"\x00\xff"}, {**BLOBS[0], "data": None}]
            await producer.publish("carriers", rows=changed, deletes=["k4"])
            for text, view in zip(BLOB_VIEWS, views, strict=True):
                final_rows = [*changed, BLOBS[2], BLOBS[4]]
                held = await table_at(reader, "carriers", -1)
                table = {name: to_python(held[name]) for name in BLOBS[0]}
                others = [i for i, code in enumerate(table["code"]) if code not in mine]
                final_rows += [{n: table[n][i] for n in BLOBS[0]} for i in others]
                final_table = {name: [row[name] for row in final_rows] for name in BLOBS[0]}
                _, final = duckdb_answer(oracle_text(text), {"carriers": final_table})
                await agrees_at_every_push(reader, view, oracle_text(text), final, "carriers")
            updates: list[Update] = []
            async with asyncio.timeout(120):
                async for update in every:
                    updates.append(update)
                    if set(every.rows) == {"k2", "k3", "k5"}:
                        break
    assert set(views[0].rows) == {"k1"}
    assert views[1].rows == {"k2": {"code": "k2", "name": None, "rank": None, "data": b"\x00\xff"}}
    assert views[3].rows["k3"] == {"code": "k3", "data": b"ab\x00"}
    assert "k9" not in views[0].rows  # nothing of the refused publish was applied
    with SqliteLog(tmp_path / "state" / "log.db") as stored:
        report = audit(updates, EVERY, key="code", index=(), log=stored, dataset="carriers")
    assert report.clean, report.problems


async def test_files_carry_bytes_as_base64(deployment, tmp_path: Path) -> None:
    """JSON files spell bytes as base64 (Spark's JSON reader decodes it); a line whose text is
    not base64 is rejected, the others go on."""
    publisher, relay = deployment
    lines = [
        '{"id": 11, "km": 1.0, "label": "AP8="}',
        '{"id": 12, "km": 1.0, "label": null}',
        '{"id": 13, "km": 1.0, "label": "!"}',
    ]
    (tmp_path / "trips" / "b.json").write_text("\n".join(lines) + "\n")
    text = (
        "SELECT id, label FROM trips"
        " WHERE id > 10 AND (label IS NULL OR label = '\\x00\\xFF'::BLOB)"
    )
    async with open_reader(publisher.url) as reader, connect(relay.url) as subscriber:
        view = await subscriber.subscribe(sql(text), dataset="trips", rate=50.0)
        async with asyncio.timeout(120):
            while len(view.rows) < 2:
                await view.wait_updates()
        await agrees_at_every_push(reader, view, text, None, "trips")
    assert view.rows == {11: {"id": 11, "label": b"\x00\xff"}, 12: {"id": 12, "label": None}}


async def test_an_every_sql_view_over_nulls_is_audited_against_the_log(
    deployment, tmp_path: Path
) -> None:
    """Mode every: each seq's rows as the log's change makes them (the audit's DuckDB runs the
    view on each logged row, NULLs as logged), NULL never equal to NaN."""
    publisher, relay = deployment
    query = sql("SELECT id, dep_delay, seats FROM flights WHERE dep_delay IS NULL OR seats > 60")
    updates: list[Update] = []
    async with open_producer(publisher.url) as producer, connect(relay.url) as subscriber:
        view = await subscriber.subscribe(query, dataset="flights", mode="every")
        for number, (delay, seats) in enumerate(
            [(None, 10), (5.0, None), (NAN, 70), (None, None), (1.0, 61)], start=100
        ):
            row = {**FLIGHTS[0], "id": number, "dep_delay": delay, "seats": seats}
            await producer.publish("flights", rows=[row])
        leaves = {**FLIGHTS[0], "id": 100, "dep_delay": 2.0, "seats": 10}  # neither holds now
        await producer.publish("flights", rows=[leaves])
        expected = {102, 103, 104}
        async with asyncio.timeout(120):
            async for update in view:
                updates.append(update)
                if {k for k in view.rows if k >= 100} == expected:
                    break
    assert view.rows[103] == {"id": 103, "dep_delay": None, "seats": None}
    with SqliteLog(tmp_path / "state" / "log.db") as stored:
        report = audit(updates, query, key="id", index=(), log=stored, dataset="flights")
    assert report.clean, report.problems


def refused(publisher: Child, dataset: str) -> float:
    """The publisher's count of rows of ``dataset`` its source refused (``/metrics``)."""
    metric = f'fanout_publisher_rows_refused_total{{dataset="{dataset}"}}'
    return scrape(publisher.url).get(metric, 0.0)


async def test_files_refuse_values_that_do_not_fit_their_columns(
    deployment, tmp_path: Path
) -> None:
    """Spark's JSON parsing would round the decimal, read the naive time as UTC and 1e400 as
    infinity: those rows are refused whole, named (key and column) in the publisher's log and
    counted in ``/metrics``; the other lines go on. A refused later line of a key leaves the
    key as the earlier line made it."""
    publisher, relay = deployment
    before = await asyncio.to_thread(refused, publisher, "trips")
    lines = [
        '{"id": 31, "started": "2024-03-02T08:00:00-05:00", "km": 2.0, "fare": 3.10}',
        '{"id": 31, "started": "2024-03-02T09:00:00Z", "km": 2.0, "fare": 1.001}',
        '{"id": 32, "started": "2024-03-02T08:00:00", "km": 2.0}',
        '{"id": 33, "km": 1e400}',
        '{"id": 34, "km": 2.0, "fare": 12345.5}',
        '{"id": 35, "km": 2.0, "fare": "0.5", "label": "AP8="}',
    ]
    (tmp_path / "trips" / "c.json").write_text("\n".join(lines) + "\n")
    text = "SELECT id, started, km, fare FROM trips WHERE id > 30"
    async with open_reader(publisher.url) as reader, connect(relay.url) as subscriber:
        view = await subscriber.subscribe(sql(text), dataset="trips", rate=50.0)
        async with asyncio.timeout(120):
            while set(view.rows) != {31, 35}:
                await view.wait_updates()
        await agrees_at_every_push(reader, view, text, None, "trips")
    assert view.rows[31] == {
        "id": 31,
        "started": datetime.datetime(2024, 3, 2, 13, tzinfo=UTC),
        "km": 2.0,
        "fare": Decimal("3.10"),
    }
    assert view.rows[35]["fare"] == Decimal("0.50")

    def logged() -> bool:
        log = Path(publisher.log).read_text()
        return "dataset trips, batch" in log and "refused 4 row(s)" in log

    await eventually(logged, timeout=60, in_thread=True)
    log = await asyncio.to_thread(Path(publisher.log).read_text)
    assert "c.json:2: key 31: column 'fare' is decimal(6,2), not 1.001" in log
    assert "c.json:3: key 32: column 'started' is timestamp, not 2024-03-02T08:00:00 (a" in log
    assert "c.json:4: key 33: column 'km' is double, not Infinity (beyond a double)" in log
    assert "c.json:5: key 34: column 'fare' is decimal(6,2), not 12345.5" in log
    await eventually(
        lambda: refused(publisher, "trips"), lambda n: n == before + 4, timeout=60, in_thread=True
    )
