"""The broker's introspection on a real relay (docs/mqtt.md, "Introspection"): ``$SYS`` topics
for clients whose rights allow them (an ACL's admin, a token's ``admin`` role; anyone without
access checks) and refused to the others; the JSON lists of clients, sessions and
subscriptions on the relay's port for admin tokens only; the same figures in ``/metrics``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from tests.mqtt.test_broker import Clients
from tests.mqtt.test_listener import mosquitto

from fanout.auth import AuthConfig, issue
from fanout.metrics import scrape
from fanout.mqtt import packets as p
from fanout.mqtt.introspection import Traffic
from fanout.mqtt.passwords import hash_password, write_passwords
from fanout.relay.config import Mqtt
from fanout.relay.shell.server import RelayServer
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

SECRET = "s" * 40
ACL = """\
user admin
topic read $SYS/#
topic readwrite plant/#

user ana
topic readwrite plant/#
"""


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[RelayServer]:
    write_passwords(
        tmp_path / "passwd", {"admin": hash_password("root"), "ana": hash_password("right")}
    )
    (tmp_path / "acl").write_text(ACL)
    section = Mqtt(
        0, password_file=tmp_path / "passwd", acl_file=tmp_path / "acl", sys_interval=0.2
    )
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, auth=AuthConfig("HS256", SECRET), mqtt=section) as (server, _),
    ):
        yield server


def port(relay: RelayServer) -> int:
    assert relay.mqtt is not None
    return relay.mqtt.port


def token(*roles: str, **claims: Any) -> str:
    return issue("HS256", SECRET, list(roles), **claims)


class Client:
    """A paho-mqtt 5.0 client: its SUBACK codes and the topics of what it received."""

    def __init__(self, port: int, client_id: str, user: str, password: str) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
        self.client.username_pw_set(user, password)
        self.lock = threading.Lock()
        self.subacks: list[int] = []
        self.topics: list[str] = []
        self.client.on_subscribe = lambda c, u, mid, codes, props: self._sub(codes)
        self.client.on_message = lambda c, u, m: self._got(m.topic)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _sub(self, codes: list[mqtt.ReasonCode]) -> None:
        with self.lock:
            self.subacks += [code.value for code in codes]

    def _got(self, topic: str) -> None:
        with self.lock:
            self.topics.append(topic)

    def got(self) -> list[str]:
        with self.lock:
            return list(self.topics)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def test_sys_topics_reach_admins_and_are_refused_to_others(relay: RelayServer) -> None:
    login = ["-p", str(port(relay)), "-u", "admin", "-P", "root"]
    out = await mosquitto(
        "mosquitto_sub", *login, "-t", "$SYS/broker/uptime", "-C", "1", "-W", "10", "-F", "%r %p"
    )
    assert out.split()[0] == "1" and out.split()[2] == "seconds"  # retained: "1 N seconds"
    ana = Client(port(relay), "ana-1", "ana", "right")
    viewer = Client(port(relay), "viewer-1", "v", token("admin"))  # an admin token
    rules = {"mqtt": ["plant/#"]}
    reader = Client(port(relay), "reader-1", "r", token("subscriber", rules=rules))
    try:
        ana.client.subscribe([("$SYS/#", 0), ("#", 0)])
        reader.client.subscribe([("$SYS/broker/clients/connected", 0), ("#", 0)])
        viewer.client.subscribe("$SYS/broker/clients/connected", 0)
        await eventually(lambda: ana.subacks == [0x87, 0], timeout=10)  # refused, allowed
        await eventually(lambda: reader.subacks == [0x87, 0], timeout=10)
        await eventually(lambda: viewer.subacks == [0], timeout=10)
        await eventually(lambda: len(viewer.got()) >= 3, timeout=10)  # retained, then each
        assert set(viewer.got()) == {"$SYS/broker/clients/connected"}
        assert ana.got() == [] and reader.got() == []  # "#" matches no $ topic either
    finally:
        for client in (ana, viewer, reader):
            client.stop()


async def test_without_access_checks_anyone_reads_sys_topics() -> None:
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, mqtt=Mqtt(0, sys_interval=0.2)) as (relay, _),
    ):
        out = await mosquitto(
            "mosquitto_sub", "-p", str(port(relay)), "-t", "$SYS/broker/#", "-C", "13", "-F", "%t"
        )
        topics = set(out.splitlines())
        # Nobody writes them, even where every client may write every topic (as Mosquitto).
        pub = ["mosquitto_pub", "-p", str(port(relay)), "-V", "mqttv5", "-q", "1", "-r"]
        refused = await asyncio.create_subprocess_exec(
            *pub, "-t", "$SYS/broker/version", "-m", "forged", stderr=asyncio.subprocess.PIPE
        )
        _, err = await refused.communicate()
        assert b"Not authorized" in err
        assert relay.mqtt is not None and relay.mqtt.broker.denials.publish == 1
        assert relay.mqtt.broker.retained["$SYS/broker/version"].payload.startswith(b"fanout ")
        assert {
            "$SYS/broker/clients/connected",
            "$SYS/broker/messages/received",
            "$SYS/broker/publish/messages/sent",
            "$SYS/broker/bytes/sent",
            "$SYS/broker/subscriptions/count",
            "$SYS/broker/retained messages/count",
            "$SYS/broker/uptime",
            "$SYS/broker/version",
        } <= topics


async def test_the_lists_of_clients_and_subscriptions_are_for_admins(relay: RelayServer) -> None:
    ana = Client(port(relay), "ana-1", "ana", "right")
    admin = Client(port(relay), "admin-1", "admin", "root")
    base = f"http://127.0.0.1:{relay.port}"
    try:
        ana.client.subscribe([("plant/a/#", 1), ("plant/b/+", 0)])
        await eventually(lambda: ana.subacks == [1, 0], timeout=10)
        # Both sessions past their CONNACK, so the two listings below see the same rows.
        await eventually(admin.client.is_connected, timeout=10)
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            answer = await http.get("/v1/mqtt/clients")
            assert answer.status_code == 401 and "a token is required" in answer.text
            subscriber = {"Authorization": f"Bearer {token('subscriber')}"}
            answer = await http.get("/v1/mqtt/clients", headers=subscriber)
            assert answer.status_code == 403 and "'admin'" in answer.json()["message"]
            headers = {"Authorization": f"Bearer {token('admin')}"}
            listed = (await http.get("/v1/mqtt/clients", headers=headers)).json()
            assert listed["total"] == 2 and listed["count"] == 2
            rows = {row["client_id"]: row for row in listed["clients"]}
            assert rows["ana-1"]["subscriptions"] == 2 and rows["ana-1"]["version"] == "5.0"
            assert rows["ana-1"]["address"] == "127.0.0.1" and rows["ana-1"]["keep_alive"] == 60
            assert rows["ana-1"]["transport"] == "tcp" and rows["ana-1"]["bytes_received"] > 0
            assert {"connected_since", "in_flight", "queued", "bytes_sent"} <= set(rows["ana-1"])
            second = (
                await http.get(f"/v1/mqtt/clients?limit=1&offset=1&access_token={token('admin')}")
            ).json()
            assert second["count"] == 1 and second["clients"] == [listed["clients"][1]]
            subs = (await http.get("/v1/mqtt/subscriptions", headers=headers)).json()
            assert [(s["client_id"], s["filter"], s["qos"]) for s in subs["subscriptions"]] == [
                ("ana-1", "plant/a/#", 1),
                ("ana-1", "plant/b/+", 0),
            ]
            sessions = (await http.get("/v1/mqtt/sessions", headers=headers)).json()
            assert [s["client_id"] for s in sessions["sessions"]] == ["admin-1", "ana-1"]
            bad = await http.get("/v1/mqtt/clients?limit=0", headers=headers)
            assert bad.status_code == 400 and "limit must be from 1 to" in bad.json()["message"]
            bad = await http.get("/v1/mqtt/clients?sort=id", headers=headers)
            assert bad.status_code == 400 and "unknown parameter 'sort'" in bad.text
            assert (await http.post("/v1/mqtt/clients", headers=headers)).status_code == 405
    finally:
        ana.stop()
        admin.stop()


async def test_the_figures_are_in_metrics(relay: RelayServer) -> None:
    login = ["-p", str(port(relay)), "-u", "ana", "-P", "right", "-q", "1"]
    await mosquitto("mosquitto_pub", *login, "-t", "plant/1", "-m", "on", "-r")
    figures = await asyncio.to_thread(scrape, relay.local_url())
    assert figures["fanout_relay_mqtt_messages_received_total"] == 1
    assert figures["fanout_relay_mqtt_retained_messages"] >= 1  # and the $SYS ones
    assert figures["fanout_relay_mqtt_bytes_received_total"] > 0
    assert figures["fanout_relay_mqtt_packets_received_total"] >= 3  # CONNECT, PUBLISH, ...
    for name in ("clients", "sessions", "subscriptions"):
        assert f"fanout_relay_mqtt_{name}" in figures
    assert "fanout_relay_mqtt_messages_sent_total" in figures


def test_traffic_counts_publish_packets_apart() -> None:
    traffic, connection = Traffic(), Traffic()
    traffic.sent([bytes([0x30, 3, 0, 1, 0x61])], connection)  # a QoS 0 PUBLISH
    traffic.sent([bytes([0x20, 2, 0, 0]), bytes([0xD0, 0])], connection)  # CONNACK, PINGRESP
    traffic.received(b"\xc0\x00\xc0\x00")  # two PINGREQs
    assert traffic == Traffic(bytes_received=4, bytes_sent=11, packets_sent=3, messages_sent=1)
    assert connection == Traffic(bytes_sent=11, packets_sent=3, messages_sent=1)


def test_no_client_writes_the_brokers_sys_topics_not_even_by_its_will() -> None:
    c = Clients()
    c.connect(1, "watch")
    c.send(1, p.Subscribe(1, (("$SYS/#", 0),)))
    c.connect(2, "dev", will=p.Will("$SYS/broker/uptime", b"forged"))
    c.send(2, p.Publish("$SYS/broker/version", b"forged", 1, True, packet_id=7))
    assert c.take(2)[-1] == p.PubAck(7, 0x87)
    c.apply(c.broker.lost(2, c.now))
    assert c.publishes(1) == [] and c.broker.retained == {}
    assert c.broker.denials.publish == 2
