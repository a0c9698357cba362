"""A message's copy for one subscriber (``outgoing.copy_for``), against the copy written out
field by field: equal always, and the message itself only where nothing differs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.outgoing import copy_for

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
