"""mqtt.subscribers: a message's plain targets, kept by topic between subscription changes (rule
4), against every session's subscriptions matched one by one (``views.topic.matches``) after
any sequence of subscribes, unsubscribes, session ends and messages."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.sessions import Session, Subscription
from fanout.mqtt.subscribers import Subscribers
from fanout.views.topic import matches

CLIENTS = ["c0", "c1"]
FILTERS = ["a/b", "a/+", "#", "b"]
TOPICS = ["a/b", "b"]

SUBSCRIBE = st.tuples(
    st.just("subscribe"),
    st.sampled_from(CLIENTS),
    st.builds(
        Subscription,
        st.sampled_from(FILTERS),
        st.integers(0, 2),
        st.booleans(),
        st.booleans(),
        st.sampled_from([None, 1, 2]),
    ),
)
UNSUBSCRIBE = st.tuples(st.just("unsubscribe"), st.sampled_from(CLIENTS), st.sampled_from(FILTERS))
END = st.tuples(st.just("end"), st.sampled_from(CLIENTS))
MESSAGE = st.tuples(
    st.just("message"),
    st.builds(p.Publish, st.sampled_from(TOPICS), st.just(b""), st.integers(0, 2), st.booleans()),
)
STEPS = st.lists(st.one_of(SUBSCRIBE, UNSUBSCRIBE, END, MESSAGE, MESSAGE), max_size=40)


def expected(sessions: dict[str, Session], message: p.Publish, origin: str) -> dict[str, Any]:
    """Rule 1 by hand: per session with a matching subscription (not No Local from itself), the
    highest QoS capped by the message's, retain if any keeps it, every identifier."""
    out: dict[str, Any] = {}
    for client, session in sessions.items():
        subs = [
            sub
            for _, sub in session.subscriptions.values()
            if matches(sub.filter, message.topic) and not (sub.no_local and client == origin)
        ]
        if subs:
            out[client] = (
                session,
                max(min(sub.qos, message.qos) for sub in subs),
                any(message.retain and sub.retain_as_published for sub in subs),
                sorted(sub.identifier for sub in subs if sub.identifier),
            )
    return out


@given(STEPS)
def test_the_targets_are_every_matching_sessions_after_any_changes(steps: list[Any]) -> None:
    subscribers, sessions = Subscribers(), {}
    for step in steps:
        match step:
            case ("subscribe", client, sub):
                session = sessions.setdefault(client, Session(client, 5, 1, 0.0))
                subscribers.install(session, sub)
            case ("unsubscribe", client, text) if client in sessions:
                subscribers.remove(sessions[client], text)
            case ("end", client) if client in sessions:
                subscribers.remove_all(sessions.pop(client))
            case ("message", message):
                for origin in ["", *CLIENTS, ""]:  # the same key again: from what was kept
                    got = subscribers.targets(message, origin, True, None)
                    assert {
                        s.client_id: (s, qos, retain, sorted(ids)) for s, qos, retain, ids in got
                    } == expected(sessions, message, origin)
                    assert len(got) == len({s.client_id for s, *_ in got})
