"""A dataset kind registered by a test is served end to end: a real Spark publisher and a real
relay, each finding the kind through its entry point, nothing else told (issue 38, step 2)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.client import connect as subscribe_to
from fanout.client.publisher import open_producer
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing import exact
from fanout.testing.wait import eventually
from fanout.views import registry
from fanout.views.topic import TopicFilter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

#: Spark picks rows up on its next micro-batch.
NEXT_BATCH = {"timeout": 90.0, "every": 0.5}

CONFIG = """
[datasets.names]
key = "topic"
schema = { topic = "string", value = "double" }
index = "exact"
source = "ingest"
"""


@pytest.fixture(scope="module")
def registered(tmp_path: Path) -> Iterator[None]:
    """The ``exact`` kind registered here, and by its entry point in the processes started."""
    registry.register(exact.KIND)
    folder = exact.entry_point_on_path(tmp_path / "plugins")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), before]))
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
        registry.unregister(exact.KIND.index)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(
    children: Children, registered: None, tmp_path: Path
) -> AsyncIterator[tuple[Child, Child]]:
    """A publisher serving an ``exact`` dataset, and a relay in front of it."""
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    args = ["--port", "0", "--log-level", "info"]
    publisher = await children.start(
        "publisher",
        ["--config", str(config), "--state-dir", str(tmp_path / "state"), *args],
        tmp_path / "publisher.log",
    )
    try:
        relay = await children.start(
            "relay", ["--publisher", publisher.url, *args], tmp_path / "relay.log"
        )
        try:
            yield publisher, relay
        finally:
            await relay.stop()
    finally:
        await publisher.stop()


async def test_a_registered_kind_is_served_through_a_publisher_and_a_relay(deployment) -> None:
    publisher, relay = deployment
    async with open_producer(publisher.url) as producer:
        rows = [
            {"topic": "a/b", "value": 1.0},
            {"topic": "a/b/c", "value": 2.0},
            {"topic": "a/c", "value": 3.0},
        ]
        await producer.publish("names", rows=rows)
        async with subscribe_to(relay.url) as client:
            view = await client.subscribe(TopicFilter("a/b"), "names")
            await eventually(
                lambda: {key: row["value"] for key, row in view.rows.items()},
                lambda held: held == {"a/b": 1.0},
                **NEXT_BATCH,
            )
            await producer.publish("names", rows=[{"topic": "a/b", "value": 4.0}])
            await eventually(
                lambda: {key: row["value"] for key, row in view.rows.items()},
                lambda held: held == {"a/b": 4.0},
                **NEXT_BATCH,
            )
    # Its snapshots were read by its own matcher, not cut by the topic filters' rules.
    metrics = await asyncio.to_thread(scrape, publisher.url)
    assert metrics['fanout_publisher_mirror_rows{dataset="names"}'] == 0
