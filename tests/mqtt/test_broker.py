"""The sans-I/O MQTT broker: whole conversations as packets in and packets out, no sockets.

Delivery is checked against a brute-force matcher written here from MQTT 4.7 (not the
broker's match index).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Close, Limits, Published, Send
from fanout.mqtt.broker import Broker
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode


class Clients:
    """Connections to one broker; what each received, decoded."""

    def __init__(self, broker: Broker | None = None) -> None:
        self.broker = broker or Broker()
        self.got: dict[int, list[p.Packet]] = defaultdict(list)
        self.closed: set[int] = set()
        self.published: list[Published] = []
        self.versions: dict[int, int] = {}
        self.now = 0.0

    def apply(self, actions: list) -> None:  # type: ignore[type-arg]
        for action in actions:
            if isinstance(action, Send):
                data = action.data
                while data:
                    first, body, taken = split(data, len(data)) or (0, b"", len(data))
                    version = self.versions.get(action.connection, p.V5)
                    self.got[action.connection].append(decode(first, body, version))
                    data = data[taken:]
            elif isinstance(action, Close):
                self.closed.add(action.connection)
                self.apply(self.broker.lost(action.connection, self.now))
            else:
                self.published.append(action)

    def send(self, connection: int, packet: p.Packet, version: int | None = None) -> None:
        version = version or self.versions.get(connection, p.V5)
        self.apply(self.broker.receive(connection, encode(packet, version), self.now))

    def connect(self, connection: int, client_id: str, version: int = p.V5, **kw: object) -> None:
        self.versions[connection] = version
        self.broker.opened(connection, self.now)
        self.send(connection, p.Connect(client_id, version, **kw))  # type: ignore[arg-type]

    def take(self, connection: int) -> list[p.Packet]:
        got, self.got[connection] = self.got[connection], []
        return got

    def publishes(self, connection: int) -> list[tuple[str, bytes, int, bool]]:
        return [
            (m.topic, m.payload, m.qos, m.retain)
            for m in self.take(connection)
            if isinstance(m, p.Publish)
        ]


def test_connect_subscribe_publish_both_versions() -> None:
    c = Clients()
    c.connect(1, "sub", p.V311)
    c.connect(2, "pub", p.V5)
    assert c.take(1) == [p.ConnAck(False, 0)]
    assert isinstance(c.take(2)[0], p.ConnAck)
    c.send(1, p.Subscribe(7, (("plant/+/temp", 1), ("plant/#", 0))))
    assert c.take(1) == [p.SubAck(7, (1, 0))]
    c.send(2, p.Publish("plant/1/temp", b"20", 1, packet_id=3))
    assert c.take(2) == [p.PubAck(3)]
    # Two matching filters: one copy, at the higher QoS (rule 4).
    got = c.take(1)
    assert [(m.topic, m.payload, m.qos) for m in got] == [("plant/1/temp", b"20", 1)]  # type: ignore[union-attr]
    assert [m.message.topic for m in c.published] == ["plant/1/temp"]
    c.send(1, p.PingReq())
    assert c.take(1) == [p.PingResp()]


def test_retained_messages_reach_new_subscribers_and_an_empty_one_removes_it() -> None:
    c = Clients()
    c.connect(1, "pub")
    c.send(1, p.Publish("a/b", b"x", 0, retain=True))
    c.send(1, p.Publish("a/c", b"y", 0, retain=True))
    c.send(1, p.Publish("a/c", b"", 0, retain=True))
    c.connect(2, "sub")
    c.take(2)
    c.send(2, p.Subscribe(1, (("a/+", 1),)))
    assert c.publishes(2) == [("a/b", b"x", 0, True)]
    c.send(2, p.Subscribe(2, (("$share/g/a/+", 1),)))
    assert c.publishes(2) == []  # a shared subscription gets no retained messages


def test_qos1_in_flight_is_sent_again_with_dup_when_a_persistent_session_returns() -> None:
    c = Clients()
    c.connect(1, "dev", p.V311, clean_start=False)
    c.send(1, p.Subscribe(1, (("t", 1),)))
    c.connect(2, "pub")
    c.send(2, p.Publish("t", b"1", 1, packet_id=1))
    first = [m for m in c.take(1) if isinstance(m, p.Publish)]
    assert [m.payload for m in first] == [b"1"]
    c.apply(c.broker.lost(1, c.now))  # gone without acknowledging
    c.send(2, p.Publish("t", b"2", 1, packet_id=2))  # queued while away
    c.send(2, p.Publish("t", b"q0", 0))  # QoS 0 is not queued
    c.connect(3, "dev", p.V311, clean_start=False)
    got = c.take(3)
    assert got[0] == p.ConnAck(True, 0)
    again = [m for m in got if isinstance(m, p.Publish)]
    assert [(m.payload, m.dup) for m in again] == [(b"1", True), (b"2", False)]
    for m in again:
        c.send(3, p.PubAck(m.packet_id or 0))
    c.connect(4, "dev", p.V311, clean_start=True)
    assert c.take(4) == [p.ConnAck(False, 0)]


def test_a_will_goes_out_when_the_connection_is_lost_not_after_disconnect() -> None:
    c = Clients()
    c.connect(1, "watch")
    c.send(1, p.Subscribe(1, (("wills/#", 0),)))
    c.connect(2, "dev", will=p.Will("wills/dev", b"gone"))
    c.connect(3, "tidy", will=p.Will("wills/tidy", b"gone"))
    c.take(1)
    c.apply(c.broker.lost(2, c.now))
    c.send(3, p.Disconnect())
    assert c.publishes(1) == [("wills/dev", b"gone", 0, False)]
    assert 3 in c.closed


def test_a_client_id_collision_takes_the_session_over() -> None:
    c = Clients()
    c.connect(1, "same", will=p.Will("w", b"old"))
    c.connect(2, "same")
    assert c.take(1)[-1] == p.Disconnect(p.SESSION_TAKEN_OVER)
    assert 1 in c.closed
    assert [m.message.topic for m in c.published] == ["w"]


def test_shared_subscriptions_give_each_message_to_one_member_in_turn() -> None:
    c = Clients()
    for connection in (1, 2, 3):
        c.connect(connection, f"m{connection}")
        c.send(connection, p.Subscribe(1, (("$share/g/jobs/#", 1),)))
        c.take(connection)
    c.connect(4, "pub")
    for n in range(9):
        c.send(4, p.Publish(f"jobs/{n}", b"", 0))
    counts = [len(c.publishes(connection)) for connection in (1, 2, 3)]
    assert counts == [3, 3, 3]


def test_a_shared_subscription_taken_again_after_all_went_gets_its_messages() -> None:
    c = Clients()
    c.connect(1, "m")
    c.connect(2, "pub")
    for _ in range(2):  # none held in between: shared ones are not looked up then
        c.send(1, p.Subscribe(1, (("$share/g/jobs", 0), ("$share/g/jobs", 0))))
        c.send(2, p.Publish("jobs", b"", 0))
        assert c.publishes(1) == [("jobs", b"", 0, False)]
        c.send(1, p.Unsubscribe(2, ("$share/g/jobs",)))
        c.send(2, p.Publish("jobs", b"", 0))
        assert c.publishes(1) == []


def test_bad_input_gets_the_mqtt_reaction() -> None:
    c = Clients(Broker(Limits(max_packet=64)))
    c.connect(1, "a")
    c.take(1)
    c.send(1, p.Subscribe(1, (("ok/#", 0), ("bad/#/x", 0))))
    assert c.take(1) == [p.SubAck(1, (0, p.TOPIC_FILTER_INVALID))]
    c.connect(2, "b", p.V311)
    c.send(2, p.Subscribe(1, (("bad#", 0),)))
    assert c.take(2)[-1] == p.SubAck(1, (0x80,))
    c.send(1, p.Publish("wild/+", b""))
    last = c.take(1)[-1]
    assert isinstance(last, p.Disconnect) and last.code == p.TOPIC_NAME_INVALID
    assert 1 in c.closed
    c.send(2, p.Publish("t", b"x" * 100))  # 3.1.1: too large is closed without a word
    assert c.take(2) == [] and 2 in c.closed
    c.connect(3, "c")
    c.take(3)
    c.send(3, p.PubRel(9))  # a PUBREL of nothing: answered, the connection stays
    assert c.take(3) == [p.PubComp(9, p.PACKET_ID_NOT_FOUND)] and 3 not in c.closed
    c.broker.opened(4, 0.0)
    c.apply(c.broker.receive(4, encode(p.PingReq(), p.V5), 0.0))
    assert 4 in c.closed  # the first packet must be CONNECT


def test_a_silent_client_is_closed_after_one_and_a_half_keep_alives() -> None:
    c = Clients()
    c.connect(1, "quiet", keepalive=10)
    c.take(1)
    c.apply(c.broker.tick(14.0))
    assert 1 not in c.closed
    c.apply(c.broker.tick(15.5))
    assert c.take(1)[-1] == p.Disconnect(p.KEEP_ALIVE_TIMEOUT, ((0x1F, "keep alive"),))
    assert 1 in c.closed


def levels_match(filter: str, topic: str) -> bool:
    """MQTT 4.7, brute force: level by level, ``+`` one level, ``#`` the rest."""
    if filter.startswith("$share/"):
        filter = filter.split("/", 2)[2]
    if topic.startswith("$") and filter[0] in "+#":
        return False
    f, t = filter.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t) or (level != "+" and level != t[i]):
            return False
    return len(f) == len(t)


level = st.sampled_from(["a", "b", "$s", ""])
topics = st.lists(level, min_size=1, max_size=3).map("/".join).filter(bool)
filters = st.lists(st.sampled_from(["a", "b", "$s", "", "+"]), min_size=1, max_size=3).flatmap(
    lambda ls: st.sampled_from(["/".join(ls), "/".join([*ls, "#"]), "#"]).filter(bool)
)


@given(
    st.lists(st.tuples(st.integers(1, 4), filters, st.booleans()), max_size=20),
    st.lists(topics, min_size=1, max_size=5),
)
def test_each_client_gets_each_message_once_iff_one_of_its_filters_matches(
    moves: list[tuple[int, str, bool]], published: list[str]
) -> None:
    c = Clients()
    held: dict[int, set[str]] = {n: set() for n in range(1, 5)}
    for n in held:
        c.connect(n, f"c{n}")
    c.connect(9, "pub")
    for n, text, subscribe in moves:
        if subscribe:
            c.send(n, p.Subscribe(1, ((text, 0),)))
            held[n].add(text)
        else:
            c.send(n, p.Unsubscribe(1, (text,)))
            held[n].discard(text)
    for n in held:
        c.take(n)
    for topic in published:
        c.send(9, p.Publish(topic, b""))
    for n, texts in held.items():
        expected = [t for t in published if any(levels_match(f, t) for f in texts)]
        assert [m[0] for m in c.publishes(n)] == expected


def test_qos_2_from_a_client_is_delivered_once_however_often_it_comes() -> None:
    c = Clients()
    c.connect(1, "sub")
    c.send(1, p.Subscribe(1, (("t/#", 2),)))
    assert c.take(1)[-1] == p.SubAck(1, (2,))
    c.connect(2, "pub")
    c.take(2)
    c.send(2, p.Publish("t/1", b"x", 2, packet_id=5))
    assert c.take(2) == [p.PubRec(5)]
    c.send(2, p.Publish("t/1", b"x", 2, dup=True, packet_id=5))  # PUBREC was lost: sent again
    assert c.take(2) == [p.PubRec(5)]
    assert c.publishes(1) == [("t/1", b"x", 2, False)]  # once
    c.send(2, p.PubRel(5))
    assert c.take(2) == [p.PubComp(5)]
    c.send(2, p.Publish("t/1", b"y", 2, packet_id=5))  # the identifier is free again: news
    assert c.publishes(1) == [("t/1", b"y", 2, False)]


def test_qos_2_to_a_client_survives_its_reconnects() -> None:
    c = Clients()
    c.connect(1, "sub", properties=((0x11, 300),))
    c.send(1, p.Subscribe(1, (("t", 2),)))
    c.take(1)
    c.connect(2, "pub")
    c.send(2, p.Publish("t", b"a", 2, packet_id=1))
    c.send(2, p.Publish("t", b"b", 2, packet_id=2))
    first, second = [m for m in c.take(1) if isinstance(m, p.Publish)]
    assert (first.qos, second.qos) == (2, 2)
    c.send(1, p.PubRec(first.packet_id or 0))
    assert c.take(1) == [p.PubRel(first.packet_id or 0)]
    c.apply(c.broker.lost(1, 0.0))  # gone before PUBCOMP, and before PUBREC of the second
    c.connect(3, "sub", clean_start=False, properties=((0x11, 300),))
    got = c.take(3)
    assert got[1:] == [p.PubRel(first.packet_id or 0), replace(second, dup=True)]
    c.send(3, p.PubComp(first.packet_id or 0))
    c.send(3, p.PubRec(second.packet_id or 0))
    c.send(3, p.PubComp(second.packet_id or 0))
    assert not c.broker.sessions["sub"].in_flight


def test_qos_2_past_receive_maximum_is_refused() -> None:
    c = Clients(Broker(Limits(receive_maximum=1)))
    c.connect(1, "pub")
    c.send(1, p.Publish("t", b"", 2, packet_id=1))
    c.send(1, p.Publish("t", b"", 2, packet_id=2))  # no PUBREL for the first yet
    last = c.take(1)[-1]
    assert isinstance(last, p.Disconnect) and last.code == p.RECEIVE_MAXIMUM_EXCEEDED


def test_a_qos_0_message_to_many_sessions_is_encoded_once_per_protocol_version() -> None:
    """Its copies share one encoding per version (``outgoing``'s ``shared``); a copy that
    differs (QoS 1, a subscription identifier, an expiry counting down) is its own."""
    clients = Clients()
    for connection, version in ((1, p.V5), (2, p.V5), (3, p.V311), (4, p.V311), (5, p.V5)):
        clients.connect(connection, f"c{connection}", version)
        properties = ((0x0B, 7),) if connection == 5 else ()
        subscribe = p.Subscribe(1, (("t/#", 0),), properties if version == p.V5 else ())
        clients.send(connection, subscribe)
        clients.take(connection)
    clients.connect(9, "producer")
    actions = clients.broker.receive(9, encode(p.Publish("t/x", b"hello", 0, False), p.V5), 0.0)
    sent = {a.connection: a.data for a in actions if isinstance(a, Send)}
    assert sent[1] is sent[2] and sent[3] is sent[4] and sent[1] != sent[3]
    assert sent[5] is not sent[1] and sent[5] != sent[1]  # its subscription identifier
    clients.apply(actions)
    got = {c: clients.take(c) for c in (1, 2, 3, 4, 5)}
    assert all(
        packets == [p.Publish("t/x", b"hello", 0, False)] for c, packets in got.items() if c != 5
    )
    (identified,) = got[5]
    assert isinstance(identified, p.Publish) and identified.properties == ((0x0B, 7),)
    expiring = p.Publish("t/y", b"soon", 0, False, properties=((0x02, 60),))
    clients.now = 10.0
    later = clients.broker.receive(9, encode(expiring, p.V5), 10.0)
    copies = [a.data for a in later if isinstance(a, Send) and a.connection in (1, 2)]
    assert len(copies) == 2 and copies[0] == copies[1]  # each encoded with what is left
