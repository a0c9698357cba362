"""Writes from any language and from tables, end to end (issue 42): a real Spark publisher and a
real relay. A pandas DataFrame's NaN and an Arrow table's null are missing there, so they arrive
as NULL (``x IS NULL`` selects them, ``x > 60`` does not); a numpy NaN stays the number NaN. A
``POST /v1/publish`` JSON write lands as a WebSocket producer's would, and what the publisher
refuses comes back with its code, changing nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import pytest_asyncio

from fanout.client import LiveView, SubscriptionError, connect
from fanout.client.publisher import PublisherClient, open_producer, open_reader
from fanout.client.republish import republish
from fanout.launch import Child, Children
from fanout.testing.deployment import publisher_and_relay
from fanout.testing.wait import eventually
from fanout.views.sql import parse as sql
from fanout.wire.options import Transduce

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

CONFIG = """
[datasets.flights]
key = "id"
index = "sql"
source = "ingest"

[datasets.flights.schema]
id = "long"
carrier = "string"
dep_delay = "double"
seats = "int"

[datasets.carriers]
key = "carrier"
index = "sql"
source = "ingest"

[datasets.carriers.schema]
carrier = "string"
n = "long"
"""
NULL_DELAY = "SELECT * FROM flights WHERE dep_delay IS NULL"
LATE = "SELECT * FROM flights WHERE dep_delay > 60"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> tuple[Child, Child]:
    """The publisher and a relay, stopped with the module's scope."""
    return await publisher_and_relay(children, tmp_path, CONFIG)


async def rows_at_publisher(reader: PublisherClient) -> dict[int, Any]:
    """The publisher's ``dep_delay`` by id (None: NULL), once every write is in its state."""
    _, columns = await reader.read("flights", sql("SELECT * FROM flights"), -1)
    delays = columns["dep_delay"]
    nulls = np.ma.getmaskarray(delays).tolist()
    values = np.ma.getdata(delays).tolist()
    return {
        key: None if null else value
        for key, null, value in zip(columns["id"].tolist(), nulls, values, strict=True)
    }


async def settled(reader: PublisherClient, ids: set[int]) -> dict[int, Any]:
    async with asyncio.timeout(120):
        while True:
            try:
                rows = await rows_at_publisher(reader)
            except SubscriptionError as exc:  # no micro-batch yet
                assert exc.code == "timeout", exc
                rows = {}
            if set(rows) >= ids:
                return rows
            await asyncio.sleep(0.3)


async def holds(view: LiveView, ids: set[int]) -> None:
    await eventually(lambda: set(view.rows), lambda held: held == ids, timeout=60)


async def test_missing_values_of_dataframes_and_arrow_tables_are_null(deployment) -> None:
    publisher, relay = deployment
    frame = pd.DataFrame(
        {
            "id": [1, 2],
            "carrier": ["AA", None],
            "dep_delay": [75.0, np.nan],  # missing in pandas: NULL
            "seats": pd.array([100, None], dtype="Int32"),
        }
    )
    table = pa.table(
        {
            "id": pa.array([3, 4], pa.int64()),
            "carrier": ["BA", "CX"],
            "dep_delay": pa.array([None, float("nan")], pa.float64()),  # null; NaN is a number
            "seats": pa.array([5, 6], pa.int32()),
        }
    )
    numpy_nan = {
        "id": np.array([5]),
        "carrier": np.array(["DL"], dtype=object),
        "dep_delay": np.array([np.nan]),  # numpy has no missing value: the number NaN
        "seats": np.array([7], dtype=np.int32),
    }
    async with open_producer(publisher.url) as producer, open_reader(publisher.url) as reader:
        await producer.publish("flights", rows=frame)
        async with connect(relay.url) as subscriber:
            await subscriber.publish("flights", table)  # through the relay
        await producer.publish("flights", rows=numpy_nan)
        delays = await settled(reader, {1, 2, 3, 4, 5})
        assert delays[1] == 75.0 and delays[2] is None and delays[3] is None
        assert np.isnan(delays[4]) and np.isnan(delays[5])
        async with connect(relay.url) as subscriber:
            nulls = await subscriber.subscribe(sql(NULL_DELAY), dataset="flights", rate=50.0)
            late = await subscriber.subscribe(sql(LATE), dataset="flights", rate=50.0)
            await holds(nulls, {2, 3})
            await holds(late, {1, 4, 5})  # NaN orders above every number in SQL


async def test_a_json_write_over_http_lands_and_a_refused_one_changes_nothing(
    deployment,
) -> None:
    publisher, relay = deployment
    base = relay.url.replace("ws://", "http://")
    write = {"upserts": [{"id": 10, "carrier": "AF", "dep_delay": None, "seats": 3}]}
    async with (
        httpx.AsyncClient(base_url=base, timeout=30) as client,
        open_reader(publisher.url) as reader,
    ):
        answer = await client.post("/v1/publish/flights", json=write)
        assert answer.status_code == 200, answer.text
        assert answer.json()["last"] >= answer.json()["first"] >= 0
        delays = await settled(reader, {10})
        assert delays[10] is None
        # The publisher refuses what its schema cannot hold: a NULL key.
        refused = await client.post("/v1/publish/flights", json={"upserts": [{"id": None}]})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == "bad_request"
        assert set(await rows_at_publisher(reader)) == set(delays)
        async with connect(relay.url) as subscriber:
            nulls = await subscriber.subscribe(sql(NULL_DELAY), dataset="flights", rate=50.0)
            await eventually(lambda: nulls.rows, lambda rows: 10 in rows, timeout=60)


async def test_a_transduced_view_holds_the_transducers_output(deployment) -> None:
    """Issue 44 item 3: the relay runs a ``window`` transducer over a SQL view; the subscriber's
    view holds its output (flights per carrier), which follows the writes, and republished as
    the dataset ``carriers`` it is served to anyone as any dataset is."""
    publisher, relay = deployment
    per_carrier = Transduce(
        "window", {"query": "SELECT carrier, count(*) AS n FROM history GROUP BY carrier"}
    )
    write = {
        "carrier": np.array(["TX", "TX", "TY"], dtype=object),
        "dep_delay": np.zeros(3),
        "seats": np.ones(3, dtype=np.int32),
    }
    async with open_producer(publisher.url) as producer, connect(relay.url) as subscriber:
        await producer.publish("flights", rows={"id": np.array([100, 101, 102]), **write})
        view = await subscriber.subscribe(
            sql("SELECT id, carrier FROM flights WHERE id >= 100"),
            dataset="flights",
            rate=50.0,
            transduce=per_carrier,
        )
        counts = lambda: {key: row["n"] for key, row in view.rows.items()}  # noqa: E731
        await eventually(counts, lambda found: found == {"TX": 2, "TY": 1}, timeout=60)
        more = {"id": np.array([103]), "carrier": np.array(["TY"], dtype=object)}
        await producer.publish(
            "flights", rows={**more, **{k: v[:1] for k, v in write.items() if k != "carrier"}}
        )
        await eventually(counts, lambda found: found == {"TX": 2, "TY": 2}, timeout=60)
        republishing = asyncio.create_task(republish(view, "carriers"))
        try:
            async with connect(relay.url) as reader:
                carriers = await reader.subscribe(
                    sql("SELECT * FROM carriers"), dataset="carriers", rate=50.0
                )
                served = lambda: {key: row["n"] for key, row in carriers.rows.items()}  # noqa: E731
                await eventually(served, lambda found: found == {"TX": 2, "TY": 2}, timeout=60)
        finally:
            republishing.cancel()
