"""A secured MQTT port on a real relay (docs/security.md, "MQTT"): a password file, an ACL file
and tokens, with stock clients (mosquitto_sub / mosquitto_pub and paho-mqtt) over loopback.
What each refusal looks like to a client, and that everyone else keeps being served."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from tests.mqtt.test_listener import mosquitto

from fanout.auth import AuthConfig, issue
from fanout.metrics import scrape
from fanout.mqtt.passwords import hash_password, write_passwords
from fanout.relay.config import Mqtt
from fanout.relay.shell.server import RelayServer
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

SECRET = "k" * 40
ACL = """\
user ana
topic read plant/a/#
topic deny plant/a/secret
topic write plant/a/cmd
"""


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[RelayServer]:
    write_passwords(tmp_path / "passwd", {"ana": hash_password("right")})
    (tmp_path / "acl").write_text(ACL)
    mqtt_section = Mqtt(
        0,
        password_file=tmp_path / "passwd",
        acl_file=tmp_path / "acl",
        login_burst=3,
        login_rate=0.01,
    )
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, auth=AuthConfig("HS256", SECRET), mqtt=mqtt_section) as (server, _),
    ):
        yield server


def port(relay: RelayServer) -> str:
    assert relay.mqtt is not None
    return str(relay.mqtt.port)


def token(roles: list[str], **kw: object) -> str:
    return issue("HS256", SECRET, roles, **kw)  # type: ignore[arg-type]


async def refused(relay: RelayServer, *args: str) -> tuple[int, str]:
    """A mosquitto_sub login that must fail: its exit status and what it printed."""
    process = await asyncio.create_subprocess_exec(
        "mosquitto_sub", "-p", port(relay), "-t", "x", "-C", "1", "-W", "10", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode is not None
    return process.returncode, err.decode().strip()


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
async def test_what_refused_logins_look_like_to_mosquitto_clients(
    relay: RelayServer, version: str
) -> None:
    v5 = version == "mqttv5"
    wrong = await refused(relay, "-V", version, "-u", "ana", "-P", "wrong")
    assert wrong[0] == (0x86 if v5 else 4), wrong
    if v5:
        assert wrong[1] == "Connection error: Bad User Name or Password"
    else:
        assert wrong[1] == "Connection error: Connection Refused: bad user name or password."
    expired = token(["subscriber"], ttl=-60)
    assert (await refused(relay, "-V", version, "-u", "x", "-P", expired))[0] == wrong[0]
    anonymous = await refused(relay, "-V", version)  # the relay requires tokens: refused
    assert anonymous[0] == (0x87 if v5 else 5), anonymous
    assert relay.mqtt is not None
    assert relay.mqtt.broker.denials.logins == {"bad_password": 1, "bad_token": 1, "anonymous": 1}


async def test_a_password_user_reads_only_what_its_acl_allows(relay: RelayServer) -> None:
    producer = token(["producer"])
    login = ["-p", port(relay), "-u", "ana", "-P", "right", "-i", "ana-1", "-W", "20"]
    sub = asyncio.create_task(
        mosquitto("mosquitto_sub", *login, "-t", "plant/#", "-q", "1", "-C", "2", "-F", "%t %p")
    )
    assert relay.mqtt is not None
    broker = relay.mqtt.broker
    await eventually(lambda: "ana-1" in broker.sessions, timeout=10)
    await eventually(lambda: bool(broker.sessions["ana-1"].subscriptions), timeout=10)
    pub = ["mosquitto_pub", "-p", port(relay), "-u", "tools", "-P", producer, "-q", "1"]
    for topic in ["plant/b/1", "plant/a/secret", "plant/a/1", "plant/a/2"]:
        await mosquitto(*pub, "-t", topic, "-m", topic[-1])
    assert (await sub).splitlines() == ["plant/a/1 1", "plant/a/2 2"]
    assert broker.denials.withheld == 2


class Paho:
    """A paho-mqtt 5.0 client that logs in and records its acknowledgements' reason codes."""

    def __init__(self, relay: RelayServer, user: str | None, password: str | None) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        if user is not None or password is not None:
            self.client.username_pw_set(user, password)
        self.connected = threading.Event()
        self.codes: dict[str, list[int]] = {"connect": [], "subscribe": [], "publish": []}
        self.messages: list[str] = []
        self.client.on_connect = lambda c, u, f, code, props: self._got("connect", [code])
        self.client.on_subscribe = lambda c, u, mid, codes, props: self._got("subscribe", codes)
        self.client.on_publish = lambda c, u, mid, code, props: self._got("publish", [code])
        self.client.on_message = lambda c, u, m: self.messages.append(m.topic)
        self.client.connect("127.0.0.1", int(port(relay)))
        self.client.loop_start()

    def _got(self, what: str, codes: list[mqtt.ReasonCode]) -> None:
        self.codes[what] += [code.value for code in codes]
        self.connected.set()

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def test_token_rules_refuse_filters_and_publishes_outside_them(relay: RelayServer) -> None:
    rules = {"mqtt": ["fleet/a/#"]}
    client = Paho(relay, "anything", token(["subscriber", "producer"], rules=rules))
    try:
        await eventually(lambda: client.codes["connect"] == [0], timeout=10)
        client.client.subscribe([("fleet/#", 1), ("office/#", 1)])
        await eventually(lambda: client.codes["subscribe"] == [1, 0x87], timeout=10)
        client.client.publish("office/1", b"x", qos=1)
        client.client.publish("fleet/b/1", b"x", qos=1)
        client.client.publish("fleet/a/1", b"x", qos=1)
        await eventually(lambda: client.codes["publish"] == [0x87, 0x87, 0], timeout=10)
        await eventually(lambda: client.messages == ["fleet/a/1"], timeout=10)
    finally:
        client.stop()
    assert relay.mqtt is not None
    assert relay.mqtt.broker.denials.subscribe == 1
    assert relay.mqtt.broker.denials.publish == 2


async def test_a_flood_of_failed_logins_is_limited_and_others_are_served(
    relay: RelayServer,
) -> None:
    watcher = Paho(relay, "ana", "right")
    try:
        await eventually(lambda: watcher.codes["connect"] == [0], timeout=10)
        watcher.client.subscribe("plant/a/#", qos=1)
        await eventually(lambda: watcher.codes["subscribe"] == [1], timeout=10)
        codes = [(await refused(relay, "-u", "ana", "-P", f"guess{n}"))[0] for n in range(5)]
        assert codes == [4, 4, 4, 3, 3]  # past the burst of 3: server unavailable, unchecked
        right = await refused(relay, "-u", "ana", "-P", "right")  # even the right password
        assert right[0] == 3
        producer = token(["producer"])
        await mosquitto(  # from another address: not held back
            "mosquitto_pub", "-p", port(relay), "-A", "127.0.0.2", "-u", "t", "-P", producer,
            "-t", "plant/a/x", "-m", "still served", "-q", "1",
        )  # fmt: skip
        await eventually(lambda: watcher.messages == ["plant/a/x"], timeout=10)
    finally:
        watcher.stop()
    assert relay.mqtt is not None
    assert relay.mqtt.broker.denials.logins == {"bad_password": 3, "rate_limited": 3}
    figures = await asyncio.to_thread(scrape, relay.local_url())
    assert figures['fanout_relay_mqtt_logins_refused_total{reason="bad_password"}'] == 3
    assert figures['fanout_relay_mqtt_logins_refused_total{reason="rate_limited"}'] == 3
    assert relay.mqtt.listener.logins.attempt("127.0.0.2", 0.0)


async def test_a_connection_ends_when_its_token_expires(relay: RelayServer) -> None:
    client = Paho(relay, "device", token(["subscriber"], ttl=2))
    reasons: list[int] = []
    client.client.on_disconnect = lambda c, u, flags, code, props: reasons.append(code.value)
    try:
        await eventually(lambda: client.codes["connect"] == [0], timeout=10)
        await eventually(lambda: reasons[:1] == [0x87], timeout=15)  # DISCONNECT 0x87
    finally:
        client.stop()
    assert relay.mqtt is not None and relay.mqtt.broker.denials.expired == 1
