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
from tests.relay.mqtt.test_broker import Clients
from tests.relay.mqtt.test_durable import _update

from fanout.relay.mqtt import packets as p
from fanout.relay.mqtt.broker import Broker
from fanout.relay.mqtt.fromlog import LogFeed
from fanout.relay.mqtt.ingest import Routes

events = st.lists(
    st.one_of(
        st.tuples(st.just("live"), st.sampled_from(["a/1", "a/2", "b/1"])),
        st.tuples(st.just("foreign"), st.sampled_from(["a/1", "a/4", "b/2"])),
        st.tuples(st.just("batch"), st.integers(0, 4)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(events)
def test_each_message_reaches_a_subscriber_once(events: list[tuple[str, Any]]) -> None:
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "s")
    c.send(1, p.Subscribe(1, (("a/+", 1),)))
    c.take(1)
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    unlogged: list[tuple[str, bytes]] = []
    foreign: list[tuple[str, bytes]] = []
    expected: Counter[tuple[str, bytes]] = Counter()
    for n, (kind, value) in enumerate(events):
        if kind == "live":
            message = (value, f"m{n}".encode())
            c.apply(broker.publish(p.Publish(value, message[1], 1, retain=True)))
            unlogged.append(message)
            expected[message] += value.startswith("a/")
        elif kind == "foreign":
            foreign.append((value, f"f{n}".encode()))
        else:  # a micro-batch: the first ``value`` live messages waiting, and the foreign ones
            taken, unlogged = unlogged[:value], unlogged[value:]
            last = dict(taken + foreign)  # the last message of each topic in the batch
            expected.update((t, m) for t, m in foreign if last[t] == m and t.startswith("a/"))
            foreign = []
            rows = [(t, m.decode()) for t, m in last.items()]
            c.apply(feed.take("topic", _update(n, rows)))
    assert Counter((t, m) for t, m, *_ in c.publishes(1)) == expected


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
    broker = Broker()
    c = Clients(broker)
    c.connect(1, "s")
    c.send(1, p.Subscribe(1, (("a/+", 1),)))
    c.take(1)
    feed = LogFeed(broker, c.apply, Routes("d"), str)
    full = replace(_update(1, [("a/1", "x")]), full=True)
    assert feed.take("topic", full) == []
