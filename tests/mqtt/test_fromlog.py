"""Other producers' rows of a topic dataset to MQTT clients: what the log sends, against a count
written here from the events (each live message once, each row of the log not carried live
once), and the retained state it keeps."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.mqtt.test_broker import Clients
from tests.mqtt.test_durable import _durable_client, _Store, _update

from fanout.client.subscriber import Update
from fanout.mqtt import packets as p
from fanout.mqtt.broker import Broker
from fanout.mqtt.durable import Follow
from fanout.mqtt.federation import Cluster
from fanout.mqtt.fromlog import LogFeed
from fanout.mqtt.ingest import Pending, Routes
from fanout.mqtt.matchtable import MatchTable
from fanout.mqtt.sessions import Subscription
from fanout.mqtt.stored import Position
from fanout.testing.ports import LOOPBACK
from fanout.wire.columns import Columns, encode_columns

events = st.lists(
    st.one_of(
        st.tuples(st.just("live"), st.sampled_from(["a/1", "a/2", "b/1"])),
        st.tuples(st.just("foreign"), st.sampled_from(["a/1", "a/4", "b/2"])),
        st.tuples(st.just("durable"), st.sampled_from(["a/1", "a/4", "b/2"])),
        st.tuples(st.just("echo"), st.integers(0, 4)),
        st.tuples(st.just("batch"), st.integers(0, 4)),
    ),
    max_size=40,
)


def _subscribed() -> tuple[Broker, Clients]:
    """A broker with client 1 ("s") subscribed to ``a/+`` at QoS 1, its SUBACK taken."""
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "s")
    c.send(1, p.Subscribe(1, (("a/+", 1),)))
    c.take(1)
    return broker, c


@settings(max_examples=60, deadline=None)
@given(events)
def test_each_message_reaches_a_subscriber_once(events: list[tuple[str, Any]]) -> None:
    broker, c = _subscribed()
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    feed.keys["d"] = "topic"  # followed
    unlogged: list[tuple[str, bytes]] = []
    foreign: list[tuple[str, bytes]] = []
    passed: set[tuple[str, bytes]] = set()  # foreign ones passed at once (durable: rule 6)
    expected: Counter[tuple[str, bytes]] = Counter()
    shown: dict[str, list[bytes]] = {}  # delivered at once, by topic, whose row has not come
    again: set[tuple[str, bytes]] = set()  # the log took a later one of its topic first
    for n, (kind, value) in enumerate(events):
        if kind == "live":
            message = (value, f"m{n}".encode())
            c.apply(broker.publish(p.Publish(value, message[1], 1, retain=True)))
            unlogged.append(message)
            shown.setdefault(value, []).append(message[1])
            expected[message] += value.startswith("a/")
        elif kind == "foreign":
            foreign.append((value, f"f{n}".encode()))
        elif kind == "durable":
            message = (value, f"d{n}".encode())
            feed.written("d", _written([message]))
            foreign.append(message)
            passed.add(message)
            shown.setdefault(value, []).append(message[1])
            expected[message] += value.startswith("a/")
        elif kind == "echo":  # a live message made durable comes back (the ingest link's)
            if value < len(unlogged):
                feed.written("d", _written([unlogged[value]]))
        else:  # a micro-batch: the first ``value`` live messages waiting, and the foreign ones
            taken, unlogged = unlogged[:value], unlogged[value:]
            last = dict(taken + foreign)  # the last message of each topic in the batch
            expected.update(
                (t, m)
                for t, m in foreign
                if last[t] == m and t.startswith("a/") and (t, m) not in passed
            )
            foreign = []
            for t, m in last.items():
                order = shown.get(t, [])
                if m in order:  # those shown before it are replaced, unless their row comes
                    again.update((t, q) for q in order[: order.index(m)])
                    del order[: order.index(m) + 1]
            rows = [(t, m.decode()) for t, m in last.items()]
            c.apply(feed.take("topic", _update(n, rows)))
    got = Counter((t, m) for t, m, *_ in c.publishes(1))
    # Rule 2: a message shown whose row the log took after a later one of its topic is shown
    # again when its row (or its echo) comes: at QoS 1, at least once; the client ends with
    # the log's order.
    for k in got.keys() | expected.keys():
        assert got[k] == expected[k] or (k in again and got[k] == expected[k] + 1), k


def _written(messages: list[tuple[str, bytes]]) -> Columns:
    """A durable write's rows of ``messages`` (topic, payload), as the live path hands it."""
    return encode_columns(
        {
            "topic": np.array([t for t, _ in messages], dtype=object),
            "payload": np.array([m.decode() for _, m in messages], dtype=object),
        }
    )


def test_a_durable_write_of_a_dataset_not_followed_waits_for_the_log() -> None:
    broker, c = _subscribed()
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    feed.written("d", _written([("a/1", b"x")]))  # its key column not known yet
    feed.keys["d"] = "topic"
    feed.written("other", _written([("a/1", b"y")]))  # not routed here
    assert c.publishes(1) == []
    feed.written("d", _written([("a/1", b"z")]))
    assert c.publishes(1) == [("a/1", b"z", 1, False)]  # news: not flagged retained
    assert broker.retained["a/1"].payload == b"z"


def test_rows_of_the_log_are_the_retained_messages() -> None:
    broker = Broker()
    c = Clients(broker)
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    c.apply(feed.take("topic", _update(1, [("a/1", "x"), ("a/2", "y")])))
    assert {t: m.payload for t, m in broker.retained.items()} == {"a/1": b"x", "a/2": b"y"}
    update = replace(_update(2, []), left=np.array(["a/1"], dtype=object))
    c.apply(feed.take("topic", update))
    assert set(broker.retained) == {"a/2"}
    c.connect(1, "late")
    c.send(1, p.Subscribe(1, (("a/#", 1),)))
    assert [(t, m, r) for t, m, _, r in c.publishes(1)] == [("a/2", b"y", True)]


def test_the_first_push_is_the_state_not_news() -> None:
    broker, c = _subscribed()
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    full = replace(_update(1, [("a/1", "x")]), full=True)
    assert feed.take("topic", full) == []


def _logged_update(seq: int, rows: list[tuple[str, str, str, bool]]) -> Update:
    """An update of a dataset that logs messages: rows (key, topic, payload, retain)."""
    entered: dict[str, Any] = {
        "id": np.array([k for k, _, _, _ in rows], dtype=object),
        "topic": np.array([t for _, t, _, _ in rows], dtype=object),
        "payload": np.array([v for _, _, v, _ in rows], dtype=object),
        "retain": np.array([r for _, _, _, r in rows], dtype=bool),
    }
    return Update(1, 1, seq, seq, False, entered, {}, np.empty(0, object), 0.0, 0.0)


def test_logged_messages_without_retain_are_news_once_and_never_retained() -> None:
    broker, c = _subscribed()
    pending = Pending(Routes("d"), logged={"d"})
    feed = LogFeed(broker, c.apply, Routes("d"), str, carried=pending.carried)
    c.apply(broker.publish(p.Publish("a/1", b"live", 1)))  # not retained, at QoS 1: logged
    c.apply(broker.publish(p.Publish("a/1", b"gone", 0)))  # QoS 0: live only, never logged
    rows = [
        ("a/1#r-000000000001", "a/1", "live", False),  # the live one: not sent again
        ("a/2", "a/2", "kept", True),  # another producer's retained message
        ("a/2#p-000000000001", "a/2", "first", False),  # another producer's messages
        ("a/2#p-000000000002", "a/2", "second", False),
    ]
    c.apply(feed.take("id", _logged_update(1, rows)))
    assert c.publishes(1) == [
        ("a/1", b"live", 1, False),
        ("a/1", b"gone", 0, False),
        ("a/2", b"kept", 1, False),
        ("a/2", b"first", 1, False),
        ("a/2", b"second", 1, False),
    ]
    assert {t: m.payload for t, m in broker.retained.items()} == {"a/2": b"kept"}
    # The message rows deleted later leave the retained state as it was.
    update = replace(_logged_update(2, []), left=np.array([k for k, *_ in rows[2:]], dtype=object))
    c.apply(feed.take("id", update))
    assert set(broker.retained) == {"a/2"}


def test_a_peer_relays_copy_of_a_passed_write_is_delivered_once() -> None:
    """Rule 6 in a cluster: an MQTT client's message at another relay comes here both as the
    durable write (``written``) and as the peer's copy, in either order: the second is not
    delivered again; a copy of a message whose row the log carried already is news."""
    broker = Broker()
    c = Clients(broker)
    feed = LogFeed(broker, c.apply, Routes("d"), str, shared=False)
    feed.keys["d"] = "topic"
    feed.written("d", _written([("a/1", b"x"), ("a/2", b"y")]))
    assert feed.relayed(p.Publish("a/1", b"x", 1, retain=True))
    assert not feed.relayed(p.Publish("a/1", b"x", 1, retain=True))  # another, the same
    assert not feed.relayed(p.Publish("a/1", b"z", 1, retain=True))
    feed.take("topic", _update(1, [("a/2", "y")]))
    assert not feed.relayed(p.Publish("a/2", b"y", 1, retain=True))


def test_only_datasets_a_subscription_could_take_are_asked_for() -> None:
    """Rule 6: writes of a routed dataset are asked for while some session here holds a filter
    reaching it: a persistent session away still does (its QoS 1 messages wait for it), a
    ``$share`` group does where it takes rows here; one that ended, or nothing, asks none."""
    broker = Broker()
    c = Clients(broker)
    routes = Routes("rest", (("plant/", "plants"), ("fleet/", "cars")))
    feed = LogFeed(broker, c.apply, routes, str)
    assert feed.wanted() == set()
    c.connect(1, "kept", p.V311, clean_start=False)
    c.send(1, p.Subscribe(1, (("plant/+/temp", 1),)))
    assert feed.wanted() == {"plants"}
    c.send(1, p.Disconnect())  # away, its session kept
    assert feed.wanted() == {"plants"}
    c.connect(2, "group")
    c.send(2, p.Subscribe(1, (("$share/g/fleet/+", 1),)))
    assert feed.wanted() == {"plants", "cars"}
    assert LogFeed(broker, c.apply, routes, str, shared=False).wanted() == {"plants"}
    c.connect(3, "kept", p.V311, clean_start=True)  # the kept session ends
    c.send(2, p.Unsubscribe(2, ("$share/g/fleet/+",)))
    assert feed.wanted() == set()
    c.send(3, p.Subscribe(1, (("#", 0),)))
    assert feed.wanted() == {"plants", "cars", "rest"}


def test_a_durable_write_reaches_a_following_session_from_its_own_stream_alone() -> None:
    """Rules 3 and 6: a persistent session following a topic through ``durable`` takes a durable
    write from its own stream, in its log's order and at its QoS 2, never as the QoS 1 copy
    passed at once (which, held while it caught up and sent among its QoS 2 ones, reached the
    client first); a plain subscription gets that copy at once."""
    broker, c, durable = _durable_client(_Store())
    c.send(1, p.Subscribe(1, (("a/+", 2),)))
    c.connect(2, "plain")
    c.send(2, p.Subscribe(1, (("a/+", 1),)))
    c.take(1), c.take(2)
    follow = Follow("s", Subscription("a/+", 2), "d", Position(1, 0, frozenset()), True)
    durable._follows[("s", "a/+")] = follow
    durable._held["s"] = []  # catching up after a restore (durable rule 5)
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    feed.durable = durable
    feed.keys["d"] = "topic"
    feed.written("d", _written([("a/1", b"x")]))
    assert c.publishes(2) == [("a/1", b"x", 1, False)]
    assert c.publishes(1) == [] and durable._held["s"] == []
    durable._take(follow, "topic", _update(1, [("a/1", "x")]))  # its own stream's row
    assert [(t, m, q) for t, m, q, _ in c.publishes(1)] == [("a/1", b"x", 2)]
    assert feed.take("topic", _update(1, [("a/1", "x")])) == []  # the log's row: passed already


class _Unreached:
    """A Redis client never called: delivering a peer's message reads no table."""

    def register_script(self, script: str) -> None:
        return None


def test_a_peers_copy_of_a_passed_write_goes_to_the_following_sessions_alone() -> None:
    """Rule 6 in a cluster with persistent sessions: the durable write passed at once reaches
    the plain subscription; the peer's copy of that message then reaches only the session
    following its topic (which did not take the passed one), at the QoS 2 it was published
    at, and the share group (served by the peers' copies alone): each gets it once."""
    broker, c, durable = _durable_client(_Store())
    c.send(1, p.Subscribe(1, (("a/+", 2),)))
    c.connect(2, "plain")
    c.send(2, p.Subscribe(1, (("a/+", 1),)))
    c.connect(3, "member")
    c.send(3, p.Subscribe(1, (("$share/g/a/+", 1),)))
    c.take(1), c.take(2), c.take(3)
    follow = Follow("s", Subscription("a/+", 2), "d", Position(1, 0, frozenset()))
    durable._follows[("s", "a/+")] = follow
    feed = LogFeed(broker, c.apply, Routes("d"), str, shared=False)
    feed.durable, feed.keys["d"] = durable, "topic"
    cluster = Cluster(MatchTable(_Unreached(), "here"), broker, c.apply, LOOPBACK)
    cluster.durable, cluster.relayed = durable, feed.relayed
    feed.written("d", _written([("a/1", b"x")]))
    c.apply(cluster._deliver(p.Publish("a/1", b"x", 2), "writer", True, None))
    assert c.publishes(2) == [("a/1", b"x", 1, False)]
    assert [(t, m, q) for t, m, q, _ in c.publishes(1)] == [("a/1", b"x", 2)]
    assert [(t, m) for t, m, *_ in c.publishes(3)] == [("a/1", b"x")]
    assert cluster.deduplicated == 1
    c.apply(cluster._deliver(p.Publish("a/2", b"y", 2), "writer", True, None))  # not passed
    got = c.publishes(2) + c.publishes(1) + c.publishes(3)
    assert [(t, m) for t, m, *_ in got] == [("a/2", b"y")] * 3


def test_a_write_a_plain_qos_2_subscription_takes_waits_for_the_peers_copy() -> None:
    """Rule 6 and QoS: a row has no QoS, so a durable write passed at once goes at QoS 1; where a
    plain QoS 2 subscription matches its topic it is not passed (that copy would stand for the
    peer's QoS 2 one, which is then dropped as a duplicate): the peer's copy reaches each
    subscription at its QoS, once. A topic only QoS 1 subscriptions match is passed at once."""
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "exact")
    c.send(1, p.Subscribe(1, (("a/1", 2),)))
    c.connect(2, "loose")
    c.send(2, p.Subscribe(1, (("a/+", 1),)))
    c.take(1), c.take(2)
    feed = LogFeed(broker, c.apply, Routes("d"), str, shared=False)
    feed.keys["d"] = "topic"
    cluster = Cluster(MatchTable(_Unreached(), "here"), broker, c.apply, LOOPBACK)
    cluster.relayed = feed.relayed
    feed.written("d", _written([("a/1", b"x"), ("a/2", b"y")]))
    assert c.publishes(1) == [] and c.publishes(2) == [("a/2", b"y", 1, False)]
    assert (feed.held_back, feed.passed) == (1, 1)
    for topic, payload in (("a/1", b"x"), ("a/2", b"y")):  # retained: the log carries them
        c.apply(cluster._deliver(p.Publish(topic, payload, 2, True), "writer", True, None))
    assert [(t, m, q) for t, m, q, _ in c.publishes(1)] == [("a/1", b"x", 2)]
    assert [(t, m, q) for t, m, q, _ in c.publishes(2)] == [("a/1", b"x", 1)]
    assert cluster.deduplicated == 1  # a/2's copy: passed already
    assert feed.take("topic", _update(1, [("a/1", "x"), ("a/2", "y")])) == []  # the log's rows
