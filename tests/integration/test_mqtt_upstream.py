"""The relay's producer link to a publisher that requires tokens over TLS (issue 41 part 4): a
real Spark publisher (``--auth-key-file``, ``--tls-cert``), a relay reaching it over ``wss://``
with ``--token-file`` and ``--tls-ca``. A retained MQTT message reaches the topic dataset once
the token file holds a token granting ``producer`` (it is read again at each connection), and a
relay started later serves it to a new subscriber as a retained message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.auth import issue
from fanout.client import SubscriptionError
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.testing.certs import self_signed
from fanout.testing.ports import free_port
from fanout.testing.wait import eventually
from fanout.tls import client_context
from fanout.views.topic import parse as topic

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SECRET = "publisher-secret-" + "m" * 32
CONFIG = """
[datasets.devices]
key = "topic"
schema = { topic = "string", payload = "string" }
index = "topic"
source = "ingest"
"""


class Keys:
    """The publisher's secret and certificate, and the relay's token file."""

    def __init__(self, directory: Path) -> None:
        self.cert, self.key = self_signed(directory / "tls")
        self.secret = directory / "secret"
        self.secret.write_text(SECRET)
        self.relay_token = directory / "relay.token"

    def token(self, *roles: str) -> str:
        return issue("HS256", SECRET, list(roles), subject="relay-mqtt")


@pytest.fixture(scope="module")
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path, keys: Keys) -> AsyncIterator[Child]:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    child = await children.start(
        "publisher",
        [
            *("--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "state")),
            *("--auth-key-file", str(keys.secret)),
            *("--tls-cert", str(keys.cert), "--tls-key", str(keys.key)),
        ],
        tmp_path / "publisher.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def run(*args: str, check: bool = True) -> str:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0 or not check, err.decode()
    return out.decode()


async def start_relay(
    children: Children, publisher: Child, keys: Keys, log: Path, mqtt_port: int
) -> Child:
    return await children.start(
        "relay",
        [
            *("--publisher", publisher.url, "--port", "0"),
            *("--token-file", str(keys.relay_token), "--tls-ca", str(keys.cert)),
            *("--mqtt-port", str(mqtt_port), "--mqtt-dataset", "devices"),
        ],
        log,
    )


async def test_retained_messages_reach_a_publisher_requiring_tokens_over_tls(
    children: Children, publisher: Child, keys: Keys, tmp_path: Path
) -> None:
    assert publisher.url.startswith("wss://")
    # A token that lets the relay follow the publisher but not write to it: the producer link
    # is refused, and retries, reading the token file again each time.
    keys.relay_token.write_text(keys.token("relay"))
    port = free_port()
    relay = await start_relay(children, publisher, keys, tmp_path / "relay-1.log", port)
    try:
        await run("mosquitto_pub", "-p", str(port), "-q", "1", "-r", "-t", "dev/1", "-m", "on")
        keys.relay_token.write_text(keys.token("relay", "producer"))
        reader_token = issue("HS256", SECRET, ["relay"], subject="test-reader")
        ssl = client_context(keys.cert)
        async with open_reader(publisher.url, token=reader_token, ssl=ssl) as reader:
            await eventually(
                lambda: reader.read("devices", topic("dev/#")),
                lambda result: (
                    list(
                        zip(result[1]["topic"].tolist(), result[1]["payload"].tolist(), strict=True)
                    )
                    == [("dev/1", "on")]
                ),
                retrying=(SubscriptionError,),  # "state is at no batch yet" before the first
                timeout=120,
                every=0.5,
            )
    finally:
        await relay.stop()
    log = (tmp_path / "relay-1.log").read_text()
    assert "does not grant role 'producer'" in log  # refused first, for the reason given
    # A relay started now reads the dataset (as a reader, with its token, over TLS) into its
    # retained messages once connected: a new subscriber gets the message, flagged retained.
    port = free_port()
    relay = await start_relay(children, publisher, keys, tmp_path / "relay-2.log", port)
    subscribe = ("mosquitto_sub", "-p", str(port), "-t", "dev/#", "-C", "1", "-W", "2")
    try:
        out = await eventually(
            lambda: run(*subscribe, "-F", "%r %t %p", check=False), bool, timeout=60
        )
        assert out.split() == ["1", "dev/1", "on"]
    finally:
        await relay.stop()
