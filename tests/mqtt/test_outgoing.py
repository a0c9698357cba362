"""A message's copy for one subscriber (``outgoing.copy_for``), against the copy written out
field by field: equal always, and the message itself only where nothing differs; a QoS 0
message's fan-out (``outgoing.fan_out``) against those copies encoded one by one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.actions import Action, Send
from fanout.mqtt.encoding import encode
from fanout.mqtt.outgoing import Encoded, copy_for, fan_out
from fanout.mqtt.rights import Rights
from fanout.mqtt.sessions import Session, Target

messages = st.builds(
    p.Publish,
    st.sampled_from(["a", "a/b"]),
    st.binary(max_size=4),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
    st.none() | st.integers(1, 65535),
    st.sampled_from([(), ((0x02, 60),), ((0x26, ("k", "v")),)]),
    st.none() | st.floats(0, 100),
)


@given(
    messages,
    st.integers(0, 2),
    st.booleans(),
    st.lists(st.integers(1, 10), max_size=2).map(tuple),
)
def test_a_copy_is_the_message_as_the_subscriber_gets_it(
    message: p.Publish, qos: int, retain: bool, identifiers: tuple[int, ...]
) -> None:
    copy = copy_for(message, qos, retain, identifiers)
    properties = message.properties + tuple((0x0B, i) for i in identifiers)
    written = p.Publish(
        message.topic, message.payload, qos, retain, properties=properties, expires=message.expires
    )
    assert copy == written
    assert (copy is message) == (copy == message)


sessions = st.builds(
    Session,
    st.text("abc", min_size=1, max_size=2),
    st.sampled_from([p.V311, p.V5]),
    st.none() | st.integers(1, 50),
    st.just(0.0),
    max_packet_size=st.sampled_from([10, 268_435_460]),
    rights=st.none() | st.sampled_from([Rights(read=("a",)), Rights(deny=("a/b",))]),
)
plain = st.builds(
    p.Publish,
    st.sampled_from(["a", "a/b"]),
    st.binary(max_size=8),
    st.just(0),
    st.booleans(),
    properties=st.sampled_from([(), ((0x26, ("k", "v")),)]),
)
targets = st.lists(
    st.tuples(
        sessions, st.just(0), st.booleans(), st.lists(st.integers(1, 10), max_size=2).map(tuple)
    ),
    max_size=6,
)


@given(plain, targets)
def test_a_fan_out_sends_each_connected_reader_its_copy_encoded_once(
    message: p.Publish, targets: list[Target]
) -> None:
    """``fan_out`` against the copies written out field by field and encoded one by one: a
    connected session that may read the topic gets its copy's bytes unless they pass its
    Maximum Packet Size; the unreadable ones are counted; equal copies share one encoding."""
    out: list[Action] = []
    shared: Encoded = {}
    unreadable = fan_out(message, targets, shared, out)
    expected, denied = [], 0
    for session, _, retain, identifiers in targets:
        if session.connection is None:
            continue
        if session.rights is not None and not session.rights.may_read(message.topic):
            denied += 1
            continue
        properties = message.properties + tuple((0x0B, i) for i in identifiers)
        copy = p.Publish(message.topic, message.payload, 0, retain, properties=properties)
        data = encode(copy, session.version)
        if len(data) <= session.max_packet_size:
            expected.append(Send(session.connection, data))
    assert out == expected and unreadable == denied
    copies = {(s.version, r, ids) for s, _, r, ids in targets if s.connection is not None}
    assert len(shared) <= len(copies)  # one encoding a distinct copy at most
