"""The broker under access (``mqtt.access``, ``mqtt.rights``, ``mqtt.denials``): whole
conversations as packets, no sockets; the verdicts are given, as the listener would hand them.

The property test's oracle is a brute-force MQTT matcher written here from MQTT 4.7, and a
search over every topic of a small alphabet, not the code under test.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.mqtt.test_broker import Clients

from fanout.mqtt import packets as p
from fanout.mqtt.access import Admitted, Refused, Verdict
from fanout.mqtt.actions import Authenticate, Limits
from fanout.mqtt.broker import Broker
from fanout.mqtt.rights import Rights


class Gated(Clients):
    """Clients of a gated broker; each connection's verdict is set before it connects."""

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(Broker(limits))
        self.broker.gated = True
        self.verdicts: dict[int, Verdict] = {}
        self.waiting: list[Authenticate] = []

    def apply(self, actions: list) -> None:  # type: ignore[type-arg]
        for action in actions:
            if isinstance(action, Authenticate):
                verdict = self.verdicts.get(action.connection)
                if verdict is None:
                    self.waiting.append(action)
                else:
                    self.apply(self.broker.admitted(action.connection, verdict, self.now))
            else:
                super().apply([action])

    def login(self, connection: int, client_id: str, rights: Rights | None, **kw: object) -> None:
        self.verdicts[connection] = Admitted(rights, client_id)
        self.connect(connection, client_id, **kw)  # type: ignore[arg-type]
        ack, *rest = self.take(connection)
        assert isinstance(ack, p.ConnAck)
        self.got[connection] = rest  # what a resumed session is sent again


def match(filter: str, topic: str) -> bool:
    """MQTT 4.7, by recursion: ``+`` one level, ``#`` the rest and its parent, no wildcard
    first level for a ``$`` topic."""
    f, t = filter.split("/"), topic.split("/")
    if t[0].startswith("$") and f[0] in ("+", "#"):
        return False

    def at(i: int, j: int) -> bool:
        if i == len(f):
            return j == len(t)
        if f[i] == "#":
            return True
        return j < len(t) and f[i] in ("+", t[j]) and at(i + 1, j + 1)

    return at(0, 0)


def readable(rights: Rights | None, topic: str) -> bool:
    if rights is None:
        return True
    granted = rights.read is None or any(match(r, topic) for r in rights.read)
    return granted and not any(match(d, topic) for d in rights.deny)


LEVELS = ["a", "b", "$s"]
#: Every topic of the alphabet (``z`` a level no filter names), up to one level past the
#: longest filter: a filter and rules meet iff one of these is matched by both.
UNIVERSE = [
    "/".join(levels)
    for depth in range(1, 5)
    for levels in itertools.product(["a", "b", "z", "$s"], repeat=depth)
    if "$s" not in levels[1:]
]
topics = st.lists(st.sampled_from(["a", "b", "z"]), min_size=1, max_size=3).map("/".join) | (
    st.lists(st.sampled_from(["a", "b"]), max_size=2).map(lambda rest: "/".join(["$s", *rest]))
)


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.sampled_from(["a", "b", "+"]), min_size=0, max_size=3))
    if draw(st.booleans()) or not levels:
        levels.append("#")
    if draw(st.booleans()) and levels[0] not in ("+", "#"):
        levels[0] = "$s" if draw(st.booleans()) else levels[0]
    return "/".join(levels)


rights_strategy = st.none() | st.builds(
    Rights,
    read=st.none() | st.lists(filters(), max_size=3).map(tuple),
    deny=st.lists(filters(), max_size=1).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(
    clients=st.lists(
        st.tuples(rights_strategy, st.lists(filters(), min_size=1, max_size=3), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    retained=st.lists(topics, max_size=4),
    live=st.lists(topics, max_size=6),
    writes=st.none() | st.lists(filters(), max_size=2).map(tuple),
)
def test_no_message_reaches_a_client_its_rights_exclude(
    clients: list[tuple[Rights | None, list[str], bool]],
    retained: list[str],
    live: list[str],
    writes: tuple[str, ...] | None,
) -> None:
    """Random readers' rights, filters (plain or ``$share``), retained and live messages from a
    writer with random write rights: each message reaches exactly the clients that subscribed
    to a filter matching it, may read it, and whose writer could write it (one member per
    share group); a filter is refused exactly when no readable topic matches it."""
    c = Gated()
    c.login(100, "publisher", Rights(write=writes))
    written = {t for t in UNIVERSE if writes is None or any(match(w, t) for w in writes)}
    for n, topic in enumerate(retained):
        c.send(100, p.Publish(topic, f"r{n}".encode(), 0, True))
    subscribed: dict[int, list[str]] = {}
    for connection, (rights, wanted, shared) in enumerate(clients, 1):
        c.login(connection, f"c{connection}", rights)
        asked = [f"$share/g/{f}" if shared else f for f in wanted]
        c.send(connection, p.Subscribe(1, tuple((f, 0) for f in asked)))
        got = c.take(connection)
        ack = next(m for m in got if isinstance(m, p.SubAck))
        for text, code in zip(wanted, ack.codes, strict=True):
            some = any(match(text, t) and readable(rights, t) for t in UNIVERSE)
            assert (code == 0) == some, (text, rights, code)  # refused iff nothing readable
        subscribed[connection] = [f for f, code in zip(wanted, ack.codes, strict=True) if code == 0]
        for message in got:
            if isinstance(message, p.Publish):  # retained, on subscribe
                assert not shared and readable(rights, message.topic)
                assert message.topic in written
                assert any(match(f, message.topic) for f in subscribed[connection])
    for n, topic in enumerate(live):
        c.send(100, p.Publish(topic, f"m{n}".encode()))
        groups: dict[str, list[int]] = {}  # $share/g/F -> its members (F granted)
        copies = 0
        for connection, (rights, _, shared) in enumerate(clients, 1):
            got = c.publishes(connection)
            wants = (
                topic in written
                and readable(rights, topic)
                and any(match(f, topic) for f in subscribed[connection])
            )
            assert len(got) <= 1 and (not got or wants), (topic, rights, got)
            if shared:
                copies += len(got)
                for f in subscribed[connection]:
                    groups.setdefault(f, []).append(connection)
            else:
                assert len(got) == wants, (topic, rights, subscribed[connection], got)
        served = [
            f
            for f, members in groups.items()
            if topic in written
            and match(f, topic)
            and any(readable(clients[m - 1][0], topic) for m in members)
        ]
        assert bool(served) <= bool(copies) and copies <= len(served)  # one member of each


def test_a_publish_outside_the_rights_is_refused_and_counted() -> None:
    c = Gated()
    c.login(1, "device", Rights(read=None, write=("up/#",)))
    c.login(2, "old", Rights(read=None, write=("up/#",)), version=p.V311)
    c.login(3, "watcher", None)
    c.send(3, p.Subscribe(1, (("#", 2),)))
    c.take(3)
    c.send(1, p.Publish("down/x", b"1", 1, packet_id=5))
    c.send(1, p.Publish("down/x", b"2", 2, packet_id=6))
    c.send(1, p.Publish("down/x", b"0", 0))
    assert c.take(1) == [p.PubAck(5, 0x87), p.PubRec(6, 0x87)]
    c.send(2, p.Publish("down/x", b"3", 2, packet_id=7), p.V311)
    c.send(2, p.PubRel(7), p.V311)
    assert c.take(2) == [p.PubRec(7), p.PubComp(7)]  # 3.1.1: no reason codes
    assert c.publishes(3) == []
    assert c.broker.denials.publish == 4
    c.send(1, p.Publish("up/x", b"ok", 1, packet_id=8))
    assert c.take(1) == [p.PubAck(8)]
    assert c.publishes(3) == [("up/x", b"ok", 1, False)]


def test_a_refused_login_gets_its_code_in_either_version() -> None:
    c = Gated()
    bad = Refused(0x86, "bad_password", "bad user name or password")
    c.verdicts = {1: bad, 2: bad, 3: Refused(0x9F, "rate_limited", "later")}
    c.connect(1, "x", p.V5, username="u", password=b"p")
    c.connect(2, "y", p.V311, username="u", password=b"p")
    c.connect(3, "z", p.V311)
    assert c.take(1) == [p.ConnAck(False, 0x86, ((0x1F, "bad user name or password"),))]
    assert c.take(2) == [p.ConnAck(False, 4)]
    assert c.take(3) == [p.ConnAck(False, 3)]
    assert c.closed == {1, 2, 3}
    assert c.broker.denials.logins == {"bad_password": 2, "rate_limited": 1}
    assert c.broker.sessions == {}


def test_packets_sent_before_the_verdict_wait_for_it_and_are_bounded() -> None:
    c = Gated(Limits(max_packet=64))
    c.connect(1, "early")
    c.send(1, p.Subscribe(1, (("a/#", 0),)))
    assert c.take(1) == [] and len(c.waiting) == 1
    c.apply(c.broker.admitted(1, Admitted(Rights(read=("b/#",)), "early"), c.now))
    got = c.take(1)
    assert isinstance(got[0], p.ConnAck) and got[1] == p.SubAck(1, (0x87,))
    c.connect(2, "flood")
    c.send(2, p.Publish("a", b"x" * 100))  # more than a packet while it waits: closed
    assert 2 in c.closed


def test_a_connection_ends_when_its_token_expires() -> None:
    c = Gated()
    c.verdicts[1] = Admitted(None, "token", lifetime=30.0)
    c.connect(1, "t")
    c.take(1)
    c.apply(c.broker.tick(29.0))
    assert 1 not in c.closed
    c.apply(c.broker.tick(31.0))
    assert 1 in c.closed and c.broker.denials.expired == 1
    assert c.take(1) == [p.Disconnect(0x87, ((0x1F, "the token expired"),))]


def test_a_session_resumed_with_narrower_rights_gets_nothing_outside_them() -> None:
    c = Gated()
    c.login(1, "shared-id", None, clean_start=False, properties=((0x11, 300),))
    c.send(1, p.Subscribe(1, (("#", 1),)))
    c.take(1)
    c.login(9, "publisher", None)
    c.send(9, p.Publish("secret/1", b"s", 1, packet_id=1))
    c.send(9, p.Publish("open/1", b"o", 1, packet_id=2))
    assert [m[0] for m in c.publishes(1)] == ["secret/1", "open/1"]  # in flight, not acked
    c.apply(c.broker.lost(1, c.now))
    c.send(9, p.Publish("secret/2", b"s", 1, packet_id=3))  # queued while away
    c.login(2, "shared-id", Rights(read=("open/#",)), clean_start=False)
    assert [m[0] for m in c.publishes(2)] == ["open/1"]
    assert c.broker.denials.withheld == 2
