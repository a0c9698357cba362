"""mqtt.subscribers: a message's plain targets, kept by topic between subscription changes (rule
4), against every session's subscriptions matched one by one (``views.topic.matches``) after
any sequence of subscribes, unsubscribes, session ends and messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import example, given
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
@example(  # each change after the topic's targets were kept: a subscribe, an unsubscribe, an end
    [
        ("message", p.Publish("a/b")),
        ("subscribe", "c0", Subscription("a/b", 0)),
        ("subscribe", "c1", Subscription("#", 1)),
        ("message", p.Publish("a/b")),
        ("unsubscribe", "c0", "a/b"),
        ("message", p.Publish("a/b")),
        ("end", "c1"),
        ("message", p.Publish("a/b")),
    ]
)
def test_the_targets_are_every_matching_sessions_after_any_changes(steps: list[Any]) -> None:
    subscribers, sessions = Subscribers(), dict[str, Session]()
    for message in run(steps, subscribers, sessions):
        for origin in ["", *CLIENTS, ""]:  # the same key again: from what was kept
            got = subscribers.targets(message, origin, True, None)
            assert {
                s.client_id: (s, qos, retain, sorted(ids)) for s, qos, retain, ids in got
            } == expected(sessions, message, origin)
            assert len(got) == len({s.client_id for s, *_ in got})


def run(
    steps: list[Any], subscribers: Subscribers, sessions: dict[str, Session]
) -> Iterator[p.Publish]:
    """Apply the subscribes, unsubscribes and session ends of ``steps`` in order, yielding each
    message step's message between them (to be checked there)."""
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
                yield message


SHARES = ["$share/g/a/+", "$share/h/#"]
SHARE = st.tuples(
    st.just("subscribe"),
    st.sampled_from(CLIENTS),
    st.builds(
        lambda text, qos: Subscription(text, qos, identifier=100 + SHARES.index(text)),
        st.sampled_from(SHARES),
        st.integers(0, 2),
    ),
)
UNSHARE = st.tuples(st.just("unsubscribe"), st.sampled_from(CLIENTS), st.sampled_from(SHARES))
WITH_SHARES = st.lists(
    st.one_of(SUBSCRIBE, SHARE, SHARE, UNSUBSCRIBE, UNSHARE, END, MESSAGE, MESSAGE), max_size=40
)


@given(WITH_SHARES)
@example(  # two members of a group take turns on a topic whose plain targets are kept
    [
        ("subscribe", "c0", Subscription("a/b", 0)),
        ("subscribe", "c0", Subscription("$share/g/a/+", 0, identifier=100)),
        ("subscribe", "c1", Subscription("$share/g/a/+", 0, identifier=100)),
        ("message", p.Publish("a/b")),
    ]
)
def test_with_shares_the_plain_targets_are_kept_and_one_member_a_group_is_added(
    steps: list[Any],
) -> None:
    """Share subscriptions carry identifiers of their own (100 + their index): a group's
    member is the one target whose identifiers hold its group's; the rest is rule 1's."""
    subscribers, sessions = Subscribers(), dict[str, Session]()
    for message in run(steps, subscribers, sessions):
        plain = {client: _plain_only(s) for client, s in sessions.items()}
        for origin in ["", *CLIENTS, ""]:
            got = subscribers.targets(message, origin, True, None)
            want = expected(plain, message, origin)
            for index, text in enumerate(SHARES):
                holders = [c for c, s in sessions.items() if text in s.subscriptions]
                members = [s for s, _, _, ids in got if 100 + index in ids]
                if holders and matches(text, message.topic):
                    assert len(members) == 1 and members[0].client_id in holders
                else:
                    assert members == []
            assert {
                s.client_id: sorted(i for i in ids if i < 100)
                for s, _, _, ids in got
                if s.client_id in want
            } == {c: w[3] for c, w in want.items()}
            assert len(got) == len({s.client_id for s, *_ in got})


def _plain_only(session: Session) -> Session:
    """A copy of ``session`` with its plain subscriptions alone (the oracle's input)."""
    subscriptions = {t: s for t, s in session.subscriptions.items() if not t.startswith("$")}
    return Session(session.client_id, 5, 1, 0.0, subscriptions=subscriptions)
