"""Persistent sessions kept in Redis: the stored record, the broker's parked CONNECT, and what
a follow stream sends of the log (checked against a count written here: each message once)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.mqtt.test_broker import Clients

from fanout.client.subscriber import Update
from fanout.mqtt import packets as p
from fanout.mqtt.actions import Restore
from fanout.mqtt.broker import Broker
from fanout.mqtt.durable import Durable, Follow, followed
from fanout.mqtt.encoding import encode
from fanout.mqtt.ingest import Routes
from fanout.mqtt.sessions import Subscription
from fanout.mqtt.stored import Position, Record

filters = st.sampled_from(["a/+", "a/#", "b", "+/x", "$share/g/a"])
subscriptions = st.builds(
    Subscription,
    filters,
    st.integers(0, 1),
    st.booleans(),
    st.booleans(),
    st.none() | st.integers(1, 1000),
)
positions = st.none() | st.builds(
    Position,
    st.integers(0, 2**40),
    st.integers(-1, 2**40),
    st.frozensets(st.text(min_size=1, max_size=8)),
    st.sampled_from(["topic", "name"]),
)


in_flight = st.tuples(
    st.integers(1, 65535), st.text(max_size=8), st.binary(max_size=8), st.booleans()
)


@given(
    st.text(max_size=10),
    st.floats(0, 1e6),
    st.lists(subscriptions, max_size=4),
    st.dictionaries(filters, positions, max_size=3),
    st.tuples(
        st.lists(in_flight, max_size=3),
        st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3),
    ),
)
def test_a_record_reads_back_as_written(
    owner: str,
    expiry: float,
    subs: list[Subscription],
    pos: dict[str, Position | None],
    qos2: tuple[list[tuple[int, str, bytes, bool]], list[tuple[str, bytes]]],
) -> None:
    record = Record(owner, expiry, tuple(subs), pos, tuple(qos2[0]), tuple(qos2[1]))
    assert Record.decode(record.encode()) == record


@pytest.mark.parametrize("text", ["", "[]", "{}", '{"owner": "a"}', '{"owner":1,"expiry":"x"}'])
def test_a_record_that_does_not_decode_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a stored MQTT session"):
        Record.decode(text)


def test_followed_subscriptions_are_qos_1_plain_filters_of_a_dataset() -> None:
    routes = Routes("devices", (("plant/", "sensors"),))
    assert followed(Subscription("dev/+", 1), routes) == "devices"
    assert followed(Subscription("plant/+/t", 1), routes) == "sensors"
    assert followed(Subscription("dev/+", 0), routes) is None
    assert followed(Subscription("$share/g/dev/+", 1), routes) is None
    assert followed(Subscription("x", 1), Routes()) is None


def test_a_parked_connect_is_answered_once_its_session_is_restored() -> None:
    broker = Broker()
    broker.durable = True
    c = Clients(broker)
    c.connect(1, "dev-1", clean_start=False, properties=((0x11, 300),))
    assert [a for a in c.published if isinstance(a, Restore)] == [Restore(1, "dev-1")]
    c.send(1, p.Subscribe(7, (("b/#", 1),)))  # read while parked: answered after the CONNACK
    assert c.take(1) == []
    c.apply(broker.restored(1, [Subscription("a/+", 1)], 0.0))
    got = c.take(1)
    assert isinstance(got[0], p.ConnAck) and got[0].session_present
    assert isinstance(got[1], p.SubAck) and got[1].packet_id == 7
    c.connect(2, "pub")
    c.send(2, p.Publish("a/x", b"1", 1, packet_id=1))
    c.send(2, p.Publish("b/y", b"2", 1, packet_id=2))
    assert [(t, m) for t, m, *_ in c.publishes(1)] == [("a/x", b"1"), ("b/y", b"2")]


def test_a_new_client_id_with_nothing_stored_gets_a_new_session() -> None:
    broker = Broker()
    broker.durable = True
    c = Clients(broker)
    c.connect(1, "fresh", clean_start=False, properties=((0x11, 300),))
    c.apply(broker.restored(1, [], 0.0))
    got = c.take(1)
    assert isinstance(got[0], p.ConnAck) and not got[0].session_present
    assert "fresh" in broker.sessions


def _update(seq: int, rows: list[tuple[str, str]]) -> Update:
    entered: dict[str, Any] = {}
    if rows:
        entered = {
            "topic": np.array([t for t, _ in rows], dtype=object),
            "payload": np.array([v for _, v in rows], dtype=object),
        }
    return Update(1, 1, seq, seq, False, entered, {}, np.empty(0, object), 0.0, 0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("live"), st.sampled_from(["a/1", "a/2", "a/3"])),
            st.tuples(st.just("foreign"), st.sampled_from(["a/1", "a/4"])),
            st.tuples(st.just("batch"), st.integers(0, 4)),
        ),
        max_size=40,
    )
)
def test_the_log_sends_only_what_the_live_path_did_not(events: list[tuple[str, Any]]) -> None:
    """Live retained messages are logged later, in order, several to a micro-batch (the last of
    a topic kept); rows of another producer only in the log. The client gets each live message
    once and each foreign row the log holds once: counted here from the events."""
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "s", properties=((0x11, 300),))
    c.send(1, p.Subscribe(1, (("a/+", 1),)))
    c.take(1)
    durable = Durable(None, broker, c.apply, Routes("d"), url=str, owner="r")  # type: ignore[arg-type]
    follow = Follow("s", Subscription("a/+", 1), "d", Position(1, 0, frozenset()))
    durable._follows[("s", "a/+")] = follow  # the stream as _sync starts it
    unlogged: list[tuple[str, bytes]] = []
    foreign: list[tuple[str, bytes]] = []
    expected: Counter[tuple[str, bytes]] = Counter()
    seq = 0
    for n, (kind, value) in enumerate(events):
        if kind == "live":
            message = (value, f"m{n}".encode())
            c.apply(broker.publish(p.Publish(value, message[1], 1, retain=True)))
            unlogged.append(message)
            expected[message] += 1
        elif kind == "foreign":
            foreign.append((value, f"f{n}".encode()))
        else:  # a micro-batch: the first ``value`` live messages waiting, and the foreign ones
            taken, unlogged = unlogged[:value], unlogged[value:]
            last = dict(taken + foreign)  # the last message of each topic in the batch
            expected.update((t, m) for t, m in foreign if last[t] == m)  # the log's rows
            foreign = []
            seq += 1
            durable._take(follow, "topic", _update(seq, [(t, m.decode()) for t, m in last.items()]))
    got = Counter((t, m) for t, m, *_ in c.publishes(1))
    assert got == expected
    assert follow.position is not None and follow.position.seq == seq


def test_a_restored_session_gets_the_gap_from_the_log_before_newer_live_messages() -> None:
    """Messages published while the session was on no relay are in the log only, later than
    the relay's seq at the restore: live ones wait until the log carried one of them."""
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "s", properties=((0x11, 300),))
    c.send(1, p.Subscribe(1, (("a/+", 1),)))
    c.take(1)
    durable = Durable(None, broker, c.apply, Routes("d"), url=str, owner="r")  # type: ignore[arg-type]
    follow = Follow("s", Subscription("a/+", 1), "d", Position(1, 0, frozenset()), True)
    durable._follows[("s", "a/+")] = follow
    durable._held["s"] = []
    durable._reached(follow, True)  # the stream is at the relay's seq already
    c.apply(broker.publish(p.Publish("a/3", b"m3", 1, retain=True)))  # live, after the restore
    assert c.publishes(1) == []
    durable._take(follow, "topic", _update(1, [("a/1", "m1"), ("a/2", "m2")]))  # the gap
    durable._check("s")
    c.apply(broker.publish(p.Publish("a/4", b"m4", 1)))  # not retained: the log never has it
    durable._take(follow, "topic", _update(2, [("a/3", "m3")]))
    durable._check("s")
    got = [(t, m) for t, m, *_ in c.publishes(1)]
    assert got == [("a/1", b"m1"), ("a/2", b"m2"), ("a/3", b"m3"), ("a/4", b"m4")]
    c.apply(broker.publish(p.Publish("a/5", b"m5", 1, retain=True)))
    assert [(t, m) for t, m, *_ in c.publishes(1)] == [("a/5", b"m5")]  # caught up: at once


class _Store:
    """Records written, by client id (isolates ``Durable`` from Redis)."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}

    async def save(self, client_id: str, record: Record) -> None:
        self.records[client_id] = record

    async def load(self, client_id: str) -> Record | None:
        return self.records.get(client_id)


def _durable_client(store: _Store, connection: int = 1) -> tuple[Broker, Clients, Durable]:
    broker = Broker()
    c = Clients(broker)
    durable = Durable(store, broker, c.apply, Routes("d"), url=str, owner="r")  # type: ignore[arg-type]
    c.connect(connection, "s", clean_start=False, properties=((0x11, 300),))
    (restore,) = [a for a in c.published if isinstance(a, Restore)]
    asyncio.run(durable._restore(restore))
    return broker, c, durable


def test_a_qos2_message_moves_with_its_packet_id_and_is_not_replayed() -> None:
    """Relay A writes the session before a QoS 2 PUBLISH and before its PUBREL; relay B restores
    it: the PUBREL again with the same packet identifier, the message not again from the log."""
    store = _Store()
    broker, c, durable = _durable_client(store)
    c.send(1, p.Subscribe(1, (("a/+", 2),)))
    c.take(1)
    actions = broker.publish(p.Publish("a/1", b"m1", 2, retain=True))
    assert [type(a).__name__ for a in actions] == ["Persist", "Send"]
    asyncio.run(durable.on_persist("s"))
    (sent,) = list(broker.sessions["s"].in_flight.values())
    assert store.records["s"].in_flight == ((sent.packet_id, "a/1", b"m1", False),)
    rec = broker.receive(1, encode(p.PubRec(sent.packet_id or 0), p.V5), 0.0)
    assert [type(a).__name__ for a in rec] == ["Persist", "Send"]  # the PUBREL waits for Redis
    asyncio.run(durable.on_persist("s"))
    assert store.records["s"].in_flight == ((sent.packet_id, "a/1", b"m1", True),)
    # Relay A dies; the client comes back to relay B.
    broker_b, c_b, durable_b = _durable_client(store, connection=5)
    got = c_b.take(5)
    assert isinstance(got[0], p.ConnAck) and got[0].session_present
    assert got[1:] == [p.PubRel(sent.packet_id or 0)]
    follow = Follow("s", Subscription("a/+", 2), "d", Position(1, 0, frozenset()))
    durable_b._take(follow, "topic", _update(1, [("a/1", "m1"), ("a/2", "m2")]))
    # The log's other row comes at the subscription's QoS 2; a/1 is not sent again.
    assert c_b.publishes(5) == [("a/2", b"m2", 2, False)]
    c_b.send(5, p.PubComp(sent.packet_id or 0))
    assert [m.topic for m in broker_b.sessions["s"].in_flight.values()] == ["a/2"]


def test_a_completed_qos2_message_is_kept_until_the_position_covers_it() -> None:
    store = _Store()
    broker, c, durable = _durable_client(store)
    c.send(1, p.Subscribe(1, (("a/+", 2),)))
    c.take(1)
    follow = Follow("s", Subscription("a/+", 2), "d", None)
    durable._follows[("s", "a/+")] = follow
    c.apply(broker.publish(p.Publish("a/1", b"m1", 2, retain=True)))  # live: not in the log yet
    c.take(1)
    (sent,) = list(broker.sessions["s"].in_flight.values())
    c.send(1, p.PubRec(sent.packet_id or 0))
    c.send(1, p.PubComp(sent.packet_id or 0))
    asyncio.run(durable.on_persist("s"))
    assert store.records["s"].in_flight == () and store.records["s"].done == (("a/1", b"m1"),)
    durable._take(follow, "topic", _update(1, [("a/1", "m1")]))  # the log carried it
    asyncio.run(durable.on_persist("s"))
    assert store.records["s"].done == ()
    assert store.records["s"].positions["a/+"] == Position(1, 1, frozenset({"a/1"}))
