"""MQTT clients on a relay, a real Spark publisher behind it: retained messages become the topic
dataset's state (and its log), and a relay started later serves that state as retained messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.client.publisher import open_reader
from fanout.launch import Child, start
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views.topic import parse as topic

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NEXT_BATCH = {"timeout": 90.0, "every": 0.5}

CONFIG = """
[datasets.devices]
key = "topic"
schema = { topic = "string", payload = "string" }
index = "topic"
source = "ingest"
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Child]:
    tmp_path = tmp_path_factory.mktemp("mqtt")
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    child = await start(
        "publisher",
        ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def run(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_retained_messages_are_the_topic_datasets_state(
    publisher: Child, tmp_path: Path
) -> None:
    async with running_relay(publisher.url, mqtt_port=0, mqtt_dataset="devices") as (relay, _):
        assert relay.mqtt is not None and relay.mqtt_ingest is not None
        pub = ["mosquitto_pub", "-p", str(relay.mqtt.port), "-q", "1"]
        await run(*pub, "-t", "dev/1/state", "-m", "on", "-r")
        await run(*pub, "-t", "dev/2/state", "-m", "off", "-r")
        await run(*pub, "-t", "dev/3/state", "-m", "gone", "-r")
        await run(*pub, "-t", "dev/3/state", "-m", "", "-r")  # removes the retained message
        await run(*pub, "-t", "dev/4/state", "-m", "live only")  # not retained: not kept
        async with open_reader(publisher.url) as reader:
            await eventually(
                lambda: reader.read("devices", topic("dev/#")),
                lambda result: (
                    sorted(
                        zip(result[1]["topic"].tolist(), result[1]["payload"].tolist(), strict=True)
                    )
                    == [("dev/1/state", "on"), ("dev/2/state", "off")]
                ),
                **NEXT_BATCH,
            )
    # A relay that starts now has no retained message of its own: it serves the dataset's.
    async with running_relay(publisher.url, mqtt_port=0, mqtt_dataset="devices") as (relay, _):
        assert relay.mqtt is not None
        broker = relay.mqtt.broker
        await eventually(lambda: len(broker.retained) == 2, timeout=30)
        out = await run(
            "mosquitto_sub", "-p", str(relay.mqtt.port), "-t", "dev/+/state", "-C", "2", "-v"
        )
        assert sorted(out.splitlines()) == ["dev/1/state on", "dev/2/state off"]
