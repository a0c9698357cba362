"""MQTT 5.0 normative statements the relay's broker keeps (docs/mqtt.md, "Conformance"), each
checked by a test named after it: sans-I/O conversations, and the three a strict client found
(``mosquitto_sub -V mqttv5``: libmosquitto refuses a packet carrying a property its type may not
have) with that client against a real relay, and against Mosquitto run the same way when it is
installed (the reference: each expectation holds there too).
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.mqtt.test_broker import Clients
from tests.mqtt.test_listener import mosquitto, port_of

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Limits
from fanout.mqtt.broker import Broker
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode
from fanout.relay.config import Mqtt
from fanout.testing.binaries import find
from fanout.testing.needs import need
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

# -- Will Delay Interval (3.1.2.5, 3.1.3.2) ----------------------------------------------------


def _will(delay: int, expiry: int = 60) -> dict[str, object]:
    will = p.Will("status/dev", b"gone", 1, False, ((0x18, delay), (0x01, 1)))
    return {"will": will, "clean_start": False, "properties": ((0x11, expiry),)}


def _watching(c: Clients, connection: int = 9) -> None:
    c.connect(connection, "watcher")
    c.send(connection, p.Subscribe(1, (("status/#", 1),)))
    c.take(connection)


def test_a_will_is_published_without_its_will_delay_interval() -> None:
    # 3.3.2.3: Will Delay Interval is none of PUBLISH's properties; the others go on.
    c = Clients()
    _watching(c)
    c.connect(1, "dev", **_will(0))
    c.apply(c.broker.lost(1, c.now))
    [will] = [m for m in c.take(9) if isinstance(m, p.Publish)]
    assert will.payload == b"gone"
    assert will.properties == ((0x01, 1),)


def test_a_delayed_will_goes_when_its_delay_passes() -> None:
    c = Clients()
    _watching(c)
    c.connect(1, "dev", **_will(5))
    c.apply(c.broker.lost(1, c.now))
    c.apply(c.broker.tick(4.0))
    assert c.take(9) == []
    c.apply(c.broker.tick(5.0))
    assert [m.payload for m in c.take(9) if isinstance(m, p.Publish)] == [b"gone"]


def test_a_delayed_will_is_not_sent_if_the_client_comes_back_in_time() -> None:
    # [MQTT-3.1.3-9]: a new connection to the session before the delay passes cancels it.
    c = Clients()
    _watching(c)
    c.connect(1, "dev", **_will(5))
    c.apply(c.broker.lost(1, c.now))
    c.connect(2, "dev", clean_start=False, properties=((0x11, 60),))
    c.apply(c.broker.tick(100.0))
    assert [m for m in c.take(9) if isinstance(m, p.Publish)] == []


def test_a_delayed_will_goes_when_its_session_ends_first() -> None:
    c = Clients()
    _watching(c)
    c.connect(1, "dev", **_will(600, expiry=2))  # the session ends before the delay passes
    c.apply(c.broker.lost(1, c.now))
    c.apply(c.broker.tick(2.0))
    assert [m.payload for m in c.take(9) if isinstance(m, p.Publish)] == [b"gone"]
    c.connect(3, "dev2", **_will(600))
    c.apply(c.broker.lost(3, 2.0))
    c.connect(4, "dev2", clean_start=True)  # clean start ends the session: its will goes
    assert [m.payload for m in c.take(9) if isinstance(m, p.Publish)] == [b"gone"]


# -- Message Expiry Interval (3.3.2.3.3) -------------------------------------------------------


def _expiring(topic: str, seconds: int, packet_id: int) -> p.Publish:
    return p.Publish(topic, b"m", 1, packet_id=packet_id, properties=((0x02, seconds),))


def test_a_queued_message_past_its_expiry_is_dropped_and_the_rest_carry_what_is_left() -> None:
    # [MQTT-3.3.2-5] dropped once expired; [MQTT-3.3.2-6] sent with the interval left.
    c = Clients()
    c.connect(1, "away", clean_start=False, properties=((0x11, 600),))
    c.send(1, p.Subscribe(1, (("t/#", 1),)))
    c.apply(c.broker.lost(1, c.now))
    c.connect(2, "pub")
    c.send(2, _expiring("t/short", 10, 1))
    c.send(2, _expiring("t/long", 100, 2))
    c.now = 30.5
    c.connect(3, "away", clean_start=False, properties=((0x11, 600),))
    got = [m for m in c.take(3) if isinstance(m, p.Publish)]
    assert [(m.topic, m.properties) for m in got] == [("t/long", ((0x02, 70),))]
    assert c.broker.expired == 1


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 60)), max_size=30),
    st.integers(0, 100),
)
def test_what_a_returning_session_gets_is_what_has_not_expired(
    messages: list[tuple[int, int]], away: int
) -> None:
    """Oracle: message i, published at a_i with interval e_i, reaches a client back at T iff
    a_i + e_i > T, in order, with ceil(a_i + e_i - T) seconds left."""
    c = Clients()
    c.connect(1, "away", clean_start=False, properties=((0x11, 600),))
    c.send(1, p.Subscribe(1, (("t", 1),)))
    c.apply(c.broker.lost(1, c.now))
    c.connect(2, "pub")
    arrivals = []
    for i, (gap, interval) in enumerate(messages):
        c.now += gap / 10
        arrivals.append((c.now, interval))
        c.send(
            2, p.Publish("t", str(i).encode(), 1, packet_id=i + 1, properties=((0x02, interval),))
        )
    back = c.now + away / 10
    expected = [
        (str(i).encode(), math.ceil(a + e - back))
        for i, (a, e) in enumerate(arrivals)
        if a + e - back > 0
    ]
    c.now = back
    c.connect(3, "away", clean_start=False, properties=((0x11, 600),))
    got = [m for m in c.take(3) if isinstance(m, p.Publish)]
    assert [(m.payload, p.prop(m.properties, 0x02)) for m in got] == expected
    assert c.broker.expired == len(messages) - len(expected)


def test_a_retained_message_expires_and_is_sent_with_what_is_left() -> None:
    c = Clients()
    c.connect(1, "pub")
    c.send(1, p.Publish("r/a", b"x", 0, retain=True, properties=((0x02, 10),)))
    c.send(1, p.Publish("r/b", b"y", 0, retain=True, properties=((0x02, 100),)))
    c.now = 20.0
    c.connect(2, "late")
    c.send(2, p.Subscribe(1, (("r/+", 0),)))
    got = [m for m in c.take(2) if isinstance(m, p.Publish)]
    assert [(m.topic, m.properties) for m in got] == [("r/b", ((0x02, 80),))]
    assert "r/a" not in c.broker.retained


# -- flow control, properties a server refuses ------------------------------------------------


def test_past_receive_maximum_a_client_gets_disconnect_0x93() -> None:
    # 3.3.4: more QoS 2 PUBLISHes awaiting PUBREL than the server's Receive Maximum.
    c = Clients(Broker(Limits(receive_maximum=2)))
    c.connect(1, "flood")
    c.take(1)
    for i in (1, 2, 3):
        c.send(1, p.Publish("t", b"x", 2, packet_id=i))
    got = c.take(1)
    assert got[-1] == p.Disconnect(
        p.RECEIVE_MAXIMUM_EXCEEDED, ((0x1F, "past Receive Maximum at QoS 2"),)
    )
    assert 1 in c.closed


def test_a_reason_string_past_the_clients_maximum_packet_size_is_left_out() -> None:
    # [MQTT-3.14.2-3]: DISCONNECT without its Reason String, not a packet the client refuses.
    c = Clients()
    c.connect(1, "small", properties=((0x27, 16),))
    c.take(1)
    c.send(1, p.Publish("t/+", b"x"))
    assert c.take(1) == [p.Disconnect(p.TOPIC_NAME_INVALID)]


# -- subscription options, session expiry, Maximum Packet Size --------------------------------


def _subscribed(c: Clients, connection: int, client_id: str, *filters: tuple[str, int]) -> None:
    c.connect(connection, client_id)
    c.send(connection, p.Subscribe(1, filters))
    c.take(connection)


def test_no_local_keeps_a_clients_own_messages_from_it() -> None:
    # [MQTT-3.8.3-3]
    c = Clients()
    _subscribed(c, 1, "me", ("t", 0x04))
    _subscribed(c, 2, "other", ("t", 0x04))
    c.send(1, p.Publish("t", b"mine"))
    assert c.publishes(1) == [] and c.publishes(2) == [("t", b"mine", 0, False)]


def test_retain_as_published_and_retained_messages_on_subscribing() -> None:
    # [MQTT-3.3.1-12], [MQTT-3.3.1-13]: live, RETAIN as published only if asked;
    # [MQTT-3.3.1-9]: a retained message sent for a new subscription has RETAIN set.
    c = Clients()
    _subscribed(c, 1, "plain", ("t", 0))
    _subscribed(c, 2, "as-published", ("t", 0x08))
    c.connect(3, "pub")
    c.send(3, p.Publish("t", b"r", retain=True))
    assert c.publishes(1) == [("t", b"r", 0, False)]
    assert c.publishes(2) == [("t", b"r", 0, True)]
    c.send(1, p.Subscribe(2, (("t", 0),)))
    assert c.publishes(1) == [("t", b"r", 0, True)]


def test_retain_handling_0_1_2() -> None:
    # [MQTT-3.3.1-9]: 0 on every SUBSCRIBE; [MQTT-3.3.1-10]: 1 only for a new subscription;
    # [MQTT-3.3.1-11]: 2 never.
    c = Clients()
    c.connect(9, "pub")
    c.send(9, p.Publish("t", b"r", retain=True))
    c.connect(1, "sub")
    for handling, first, again in ((0, 1, 1), (1, 1, 0), (2, 0, 0)):
        options = handling << 4
        c.send(1, p.Unsubscribe(2, ("t",)))  # the next SUBSCRIBE makes a new subscription
        c.take(1)
        c.send(1, p.Subscribe(3, (("t", options),)))
        assert len(c.publishes(1)) == first
        c.send(1, p.Subscribe(4, (("t", options),)))
        assert len(c.publishes(1)) == again


def test_overlapping_subscriptions_give_one_copy_with_every_identifier() -> None:
    # [MQTT-3.3.4-3], [MQTT-3.3.4-4]: one copy, the identifiers of all matching subscriptions;
    # [MQTT-3.3.4-5]: none for a subscription that has none.
    c = Clients()
    c.connect(1, "sub")
    c.send(1, p.Subscribe(1, (("a/+", 1),), ((0x0B, 7),)))
    c.send(1, p.Subscribe(2, (("a/#", 0),), ((0x0B, 9),)))
    c.send(1, p.Subscribe(3, (("#", 0),)))
    c.take(1)
    c.connect(2, "pub")
    c.send(2, p.Publish("a/b", b"x", 1, packet_id=1))
    [copy] = [m for m in c.take(1) if isinstance(m, p.Publish)]
    assert copy.qos == 1 and sorted(v for k, v in copy.properties if k == 0x0B) == [7, 9]


def test_session_expiry_past_the_relays_limit_is_granted_as_the_limit() -> None:
    # 3.2.2.3.2: the server's Session Expiry Interval in CONNACK overrides the client's.
    c = Clients(Broker(Limits(session_expiry=600)))
    c.connect(1, "c", properties=((0x11, 0xFFFFFFFF),))
    [ack] = c.take(1)
    assert isinstance(ack, p.ConnAck) and p.prop(ack.properties, 0x11) == 600
    c.connect(2, "d", properties=((0x11, 60),))
    [ack] = c.take(2)
    assert isinstance(ack, p.ConnAck) and p.prop(ack.properties, 0x11) is None


def test_a_message_past_the_clients_maximum_packet_size_is_not_sent() -> None:
    # [MQTT-3.1.2-24], [MQTT-3.1.2-25]: left out as if delivered; the next one goes.
    c = Clients()
    c.connect(1, "small", properties=((0x27, 64),))
    c.send(1, p.Subscribe(1, (("t", 1),)))
    c.take(1)
    c.connect(2, "pub")
    c.send(2, p.Publish("t", b"x" * 100, 1, packet_id=1))
    c.send(2, p.Publish("t", b"fits", 1, packet_id=2))
    got = [m for m in c.take(1) if isinstance(m, p.Publish)]
    assert [m.payload for m in got] == [b"fits"]
    session = c.broker.sessions["small"]
    assert list(session.in_flight) == [m.packet_id for m in got]


def _refused(packet: p.Packet, code: int) -> None:
    c = Clients()
    c.connect(1, "c")
    c.take(1)
    c.send(1, packet)
    [disconnect] = c.take(1)
    assert isinstance(disconnect, p.Disconnect) and disconnect.code == code
    assert 1 in c.closed


def test_a_topic_alias_past_topic_alias_maximum_is_refused_0x94() -> None:
    # 3.3.2.3.4: the relay announces no Topic Alias Maximum (0): any alias is invalid.
    _refused(p.Publish("t", b"x", properties=((0x23, 1),)), p.TOPIC_ALIAS_INVALID)


def test_a_subscription_identifier_from_a_client_is_a_protocol_error() -> None:
    _refused(p.Publish("t", b"x", properties=((0x0B, 1),)), p.PROTOCOL_ERROR)  # [MQTT-3.3.4-6]


def test_subscription_identifier_0_is_a_protocol_error() -> None:
    _refused(p.Subscribe(1, (("t", 0),), ((0x0B, 0),)), p.PROTOCOL_ERROR)  # 3.8.2.1.2


def test_connect_property_values_that_are_protocol_errors() -> None:
    # 3.1.2.11: Receive Maximum 0, Maximum Packet Size 0, Request * Information not 0 or 1.
    for properties in (((0x21, 0),), ((0x27, 0),), ((0x17, 2),), ((0x19, 7),)):
        c = Clients()
        c.connect(1, "c", properties=properties)
        assert c.take(1) == [] and 1 in c.closed and c.broker.refused == 1


def test_an_authentication_method_gets_connack_0x8c() -> None:
    # [MQTT-4.12.0-1]: the relay has no enhanced authentication.
    c = Clients()
    c.connect(1, "c", properties=((0x15, "SCRAM-SHA-1"),))
    assert c.take(1) == [p.ConnAck(False, p.BAD_AUTHENTICATION_METHOD)]
    assert 1 in c.closed and "c" not in c.broker.sessions


# -- with a strict client, against a real relay and against Mosquitto -----------------------------


@pytest.fixture(params=["relay", "mosquitto"])
async def broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The MQTT port of a real relay, or of Mosquitto (Debian's ``mosquitto``) run the same
    way: the reference each expectation here is checked against."""
    if request.param == "relay":
        async with _relay() as port:
            yield port
        return
    need("mosquitto")
    port = free_port()
    config = tmp_path / "mosquitto.conf"
    config.write_text(f"listener {port} {LOOPBACK}\nallow_anonymous true\n")
    process = await asyncio.create_subprocess_exec(
        find("mosquitto") or "mosquitto", "-c", str(config), stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await eventually(lambda: _listening(port), timeout=10)
        yield str(port)
    finally:
        process.terminate()
        await process.wait()


@asynccontextmanager
async def _relay() -> AsyncIterator[str]:
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, mqtt=Mqtt(0)) as (server, _),
    ):
        yield port_of(server)


@pytest.fixture
async def relay() -> AsyncIterator[str]:
    """A real relay's MQTT port alone: where Mosquitto answers otherwise."""
    async with _relay() as port:
        yield port


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((LOOPBACK, port)) == 0


class RawClient:
    """An MQTT 5.0 connection through our codec: what no stock client lets a test send."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.received = b""

    @classmethod
    async def connect(cls, port: str, client_id: str, **kw: object) -> tuple[RawClient, p.ConnAck]:
        reader, writer = await asyncio.open_connection(LOOPBACK, int(port))
        client = cls(reader, writer)
        writer.write(encode(p.Connect(client_id, p.V5, **kw), p.V5))  # type: ignore[arg-type]
        while not (packets := client.packets()):
            client.received += await reader.read(4096)
        assert isinstance(packets[0], p.ConnAck) and packets[0].code == p.SUCCESS
        return client, packets[0]

    def packets(self) -> list[p.Packet]:
        """The whole packets received so far (taken)."""
        found: list[p.Packet] = []
        while whole := split(self.received, 1 << 28):
            found.append(decode(whole[0], whole[1], p.V5))
            self.received = self.received[whole[2] :]
        return found


async def test_a_strict_client_gets_a_will_published_with_a_delay(broker: str) -> None:
    watch = asyncio.create_task(
        mosquitto("mosquitto_sub", "-V", "mqttv5", "-p", broker, "-t", "status/#", "-C", "1", "-v")
    )
    await asyncio.sleep(0.5)
    client, _ = await RawClient.connect(broker, "dev", **_will(1))
    client.writer.transport.abort()  # gone without DISCONNECT: the will goes a second on
    assert (await watch).strip() == "status/dev gone"


async def test_a_strict_client_gets_queued_messages_with_what_is_left_of_their_expiry(
    broker: str,
) -> None:
    session = ["-V", "mqttv5", "-p", broker, "-i", "meter", "-c", "-x", "600", "-q", "1"]
    await mosquitto("mosquitto_sub", *session, "-t", "exp/#", "-E")  # subscribed, then away
    for topic, seconds in (("exp/short", "1"), ("exp/long", "60")):
        publish = ["-t", topic, "-m", "m", "-q", "1"]
        expiry = ["-D", "publish", "message-expiry-interval", seconds]
        await mosquitto("mosquitto_pub", "-V", "mqttv5", "-p", broker, *publish, *expiry)
    await asyncio.sleep(2.1)
    out = await mosquitto("mosquitto_sub", *session, "-t", "exp/#", "-C", "1", "-F", "%t %E")
    topic, left = out.split()
    assert topic == "exp/long" and 55 <= int(left) <= 58


async def test_a_client_past_receive_maximum_reads_disconnect_0x93_then_the_end(
    relay: str,
) -> None:
    # 3.3.4 asks for DISCONNECT 0x93. (Mosquitto 2.0.11 answers each PUBLISH past its Receive
    # Maximum with PUBREC 0x97 instead and stays connected: not run against it.) Before: the
    # relay closed with the flood unread, the kernel reset the connection, and the reset could
    # destroy the DISCONNECT before the client read it.
    client, ack = await RawClient.connect(relay, "flood")
    maximum = p.prop(ack.properties, 0x21, 65535)
    flood = b"".join(
        encode(p.Publish("t", b"x" * 100, 2, packet_id=i), p.V5) for i in range(1, 20_000)
    )
    client.writer.write(flood)
    while chunk := await client.reader.read(65536):
        client.received += chunk  # no ConnectionResetError: the broker closed with a FIN
    packets = client.packets()
    assert isinstance(packets[-1], p.Disconnect)
    assert packets[-1].code == p.RECEIVE_MAXIMUM_EXCEEDED
    assert sum(isinstance(m, p.PubRec) for m in packets) == maximum
    client.writer.close()


async def _answers(port: str, packets: list[p.Packet]) -> tuple[list[tuple[str, int]], bool]:
    """Send ``packets`` on a new connection; (type, reason code) of each packet answered, and
    whether the broker closed the connection (cleanly, within 5 s)."""
    reader, writer = await asyncio.open_connection(LOOPBACK, int(port))
    client = RawClient(reader, writer)
    writer.write(b"".join(encode(packet, p.V5) for packet in packets))
    closed = True
    try:
        async with asyncio.timeout(5):
            while chunk := await reader.read(65536):
                client.received += chunk
    except TimeoutError:
        closed = False
    finally:
        writer.close()
    return [(type(m).__name__, getattr(m, "code", 0)) for m in client.packets()], closed


CONNECT = p.Connect("c", p.V5)
#: What both the relay and Mosquitto answer, per statement (docs/mqtt.md: where they differ).
AGREED: dict[str, tuple[list[p.Packet], list[tuple[str, int]]]] = {
    "4.12.0-1 unsupported Authentication Method": (
        [p.Connect("c", p.V5, properties=((0x15, "SCRAM-SHA-1"),))],
        [("ConnAck", p.BAD_AUTHENTICATION_METHOD)],
    ),
    "3.1.2.11.3 Receive Maximum 0": ([p.Connect("c", p.V5, properties=((0x21, 0),))], []),
    "3.1.2.11.4 Maximum Packet Size 0": ([p.Connect("c", p.V5, properties=((0x27, 0),))], []),
    "3.1.2.11.7 Request Problem Information 2": (
        [p.Connect("c", p.V5, properties=((0x17, 2),))],
        [],
    ),
    "3.3.2.3.4 topic alias past the maximum": (
        [CONNECT, p.Publish("t", b"x", properties=((0x23, 11),))],
        [("ConnAck", 0), ("Disconnect", p.TOPIC_ALIAS_INVALID)],
    ),
    "3.14.2-2 session expiry set at DISCONNECT after 0": (
        [CONNECT, p.Disconnect(0, ((0x11, 5),))],
        [("ConnAck", 0), ("Disconnect", p.PROTOCOL_ERROR)],
    ),
}


@pytest.mark.parametrize("statement", sorted(AGREED))
async def test_refusals_are_those_of_the_reference_broker(broker: str, statement: str) -> None:
    packets, expected = AGREED[statement]
    assert await _answers(broker, packets) == (expected, True)
