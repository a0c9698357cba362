"""mqtt.subscribing.retained_for: the retained messages a new subscription gets, against a
level-by-level matcher written here (MQTT 4.7), with expired ones withheld and dropped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.subscribing import retained_for
from fanout.testing.oracle import filter_matches

NOW = 100.0
LEVELS = st.sampled_from(["a", "b", "", "$s"])
TOPICS = st.lists(LEVELS, min_size=1, max_size=3).map("/".join)
FILTERS = st.builds(
    lambda levels, tail: "/".join(levels + tail),
    st.lists(st.sampled_from(["a", "b", "", "+", "$s"]), min_size=0, max_size=3),
    st.sampled_from([[], ["#"]]),
).filter(bool)
EXPIRES = st.sampled_from([None, NOW - 1, NOW, NOW + 1])


def oracle(topic_filter: str, topic: str) -> bool:
    """MQTT matching level by level (``filter_matches``), and a wildcard first never matches a
    topic starting with ``$`` (4.7.2)."""
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    return filter_matches(topic_filter, topic)


@given(
    st.dictionaries(TOPICS, st.tuples(EXPIRES, st.integers(0, 2)), max_size=12),
    FILTERS,
    st.integers(0, 2),
)
def test_a_subscription_gets_the_unexpired_retained_messages_it_matches(
    stored: dict[str, tuple[float | None, int]], topic_filter: str, qos: int
) -> None:
    retained = {
        topic: p.Publish(topic, topic.encode(), stored_qos, True, expires=expires)
        for topic, (expires, stored_qos) in stored.items()
    }
    matched = [t for t in sorted(stored) if oracle(topic_filter, t)]
    live = [t for t in matched if stored[t][0] is None or stored[t][0] > NOW]

    got = retained_for(retained, topic_filter, qos, NOW)

    assert [m.topic for m in got] == live
    assert all(m.retain and m.qos == min(qos, stored[m.topic][1]) for m in got)
    assert all(m.payload == m.topic.encode() for m in got)
    # the expired ones matched are dropped; every other stays
    assert set(retained) == set(stored) - (set(matched) - set(live))
