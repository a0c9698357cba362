"""Which topic dataset an MQTT message is kept in, and the batches waiting for the publisher."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import ConfigError
from fanout.mqtt.ingest import Batch, Pending, Routes, is_message_key, parse_route
from fanout.mqtt.packets import Publish
from fanout.testing import oracle


def test_the_longest_prefix_wins_then_the_default() -> None:
    routes = Routes("all", (("plant/", "plants"), ("plant/7/", "seven")))
    assert routes.dataset("plant/7/temp") == "seven"
    assert routes.dataset("plant/1/temp") == "plants"
    assert routes.dataset("home/door") == "all"
    assert Routes(None, (("a/", "x"),)).dataset("b") is None
    assert routes.datasets() == ["all", "plants", "seven"]


def test_routes_are_checked() -> None:
    assert parse_route("plant/=sensors") == ("plant/", "sensors")
    for bad in ("plant/", "=x", "a/=", "a/+=x", "#=x"):
        with pytest.raises(ConfigError):
            parse_route(bad)


messages = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]), st.sampled_from([b"", b"1", b"2", b"\xff"]), st.booleans()
    ),
    max_size=20,
)


@given(messages)
def test_a_batch_holds_the_last_retained_message_of_each_topic(
    sent: list[tuple[str, bytes, bool]],
) -> None:
    pending = Pending(Routes("d"))
    for topic, payload, retain in sent:
        pending.add(Publish(topic, payload, 0, retain))
    # The oracle: replay the messages on a dict, as the dataset's state would be.
    state: dict[str, str | None] = {}
    for topic, payload, retain in sent:
        if retain and payload != b"\xff":
            state[topic] = payload.decode() or None
    batches = pending.take()
    upserts = {t: v for t, v in state.items() if v is not None}
    deletes = sorted(t for t, v in state.items() if v is None)
    assert batches == ([Batch("d", upserts, deletes)] if state else [])
    assert pending.skipped == sum(1 for _, p, r in sent if r and p == b"\xff")
    assert pending.take() == []


def test_past_its_bound_new_topics_are_dropped_and_counted() -> None:
    pending = Pending(Routes("d"), max_pending=2)
    for topic in ("a", "b", "c", "a"):
        pending.add(Publish(topic, b"x", 0, True))
    assert pending.take() == [Batch("d", {"a": "x", "b": "x"}, [])]
    assert pending.dropped == 1


logged_messages = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from([b"", b"1", b"2", b"\xff"]),
        st.booleans(),
        st.integers(0, 2),
    ),
    max_size=20,
)


@given(logged_messages)
def test_a_dataset_that_logs_messages_gets_each_one_without_retain_as_a_row(
    sent: list[tuple[str, bytes, bool, int]],
) -> None:
    pending = Pending(Routes("d"), logged={"d"})
    for topic, payload, retain, qos in sent:
        pending.add(Publish(topic, payload, qos, retain))
    # The oracle: each message without RETAIN at QoS 1 or 2 whose payload is text is a row,
    # in the order sent; the retained state as a dict of the last retained message per topic.
    state: dict[str, str | None] = {}
    rows: list[tuple[str, str]] = []
    for topic, payload, retain, qos in sent:
        if payload == b"\xff":
            continue
        if retain:
            state[topic] = payload.decode() or None
        elif qos:
            rows.append((topic, payload.decode()))
    batches = pending.take()
    if not state and not rows:
        assert batches == []
        return
    (batch,) = batches
    assert batch.upserts == {t: v for t, v in state.items() if v is not None}
    assert batch.deletes == sorted(t for t, v in state.items() if v is None)
    assert [(t, v) for _, t, v in batch.messages] == rows
    keys = [k for k, _, _ in batch.messages]
    assert len(set(keys)) == len(keys) and all(is_message_key(k) for k in keys)
    for topic in ("a", "b"):  # a topic's keys sort in the order its messages came
        mine = [k for k, t, _ in batch.messages if t == topic]
        assert mine == sorted(mine)
    for topic, payload, retain, qos in sent:
        carried = pending.carried(Publish(topic, payload, qos, retain))
        assert carried == (
            payload != b"\xff" and (bool(retain and payload) or (not retain and qos > 0))
        )


def test_a_dataset_that_does_not_log_messages_keeps_only_retained_ones() -> None:
    pending = Pending(Routes("d"))
    assert not pending.add(Publish("a", b"x", 1, False))
    assert not pending.carried(Publish("a", b"x", 2, False))
    assert pending.carried(Publish("a", b"x", 0, True))
    assert pending.take() == []


LEVEL = st.sampled_from(["a", "b", "ab", ""])
TOPICS = [
    "/".join(levels)
    for size in (1, 2, 3)
    for levels in itertools.product(["a", "b", "ab", ""], repeat=size)
]


def filter_matches(text: str, topic: str) -> bool:
    """MQTT 3.1.1 section 4.7, level by level (a ``$share/GROUP/`` one as its filter)."""
    if text.startswith("$share/"):
        text = text.split("/", 2)[2]
    return oracle.filter_matches(text, topic)


@settings(max_examples=300, deadline=None)
@given(
    default=st.sampled_from([None, "rest"]),
    prefixes=st.lists(
        st.tuples(st.sampled_from(["a", "a/", "a/b", "ab/", "b/", "/", "b/a/"]), LEVEL), max_size=3
    ),
    levels=st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=3),
    tail=st.booleans(),
    shared=st.booleans(),
)
def test_a_filter_reaches_every_dataset_a_topic_it_matches_belongs_to(
    default: str | None,
    prefixes: list[tuple[str, str]],
    levels: list[str],
    tail: bool,
    shared: bool,
) -> None:
    """Against every topic of up to three levels: none a filter matches is routed to a dataset
    ``reachable`` leaves out; a filter without wildcards reaches its one topic's dataset only."""
    routes = Routes(default, tuple((prefix, f"d{name}") for prefix, name in dict(prefixes).items()))
    text = "/".join(levels + (["#"] if tail else []))
    text = f"$share/g/{text}" if shared else text
    reached = routes.reachable(text)
    belongs = {routes.dataset(topic) for topic in TOPICS if filter_matches(text, topic)}
    assert belongs - {None} <= reached
    if "+" not in text and "#" not in text:
        assert reached == belongs - {None}
