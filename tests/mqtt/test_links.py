"""Exactly once between relays: a link's sender and receiver through a connection that breaks
at random points, against the messages sent (each delivered once, in order)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.mqtt.links import Incoming, Outgoing

events = st.lists(
    st.one_of(
        st.just(("send", 0)),
        st.tuples(st.just("read"), st.integers(0, 5)),
        st.just(("ack", 0)),
        st.tuples(st.just("break"), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_a_broken_link_delivers_each_message_once_in_order(events: list[tuple[str, Any]]) -> None:
    link, incoming = Outgoing(), Incoming()
    wire: list[bytes] = []  # written, not yet read by the receiver
    acks: list[int] = []  # acknowledgements on their way back
    delivered: list[int] = []
    sent = 0
    connected = True

    def read(count: int) -> None:
        for data in wire[:count]:
            sender, number = data.decode().split(":")
            if incoming.accept(sender, int(number)):
                delivered.append(int(number))
        del wire[:count]
        acks.append(incoming.last.get("a", 0))

    for kind, value in events:
        if kind == "send":
            sent += 1
            link.add(lambda n: f"a:{n}".encode())
            if connected:
                wire.extend(link.to_write())
        elif kind == "read":
            read(value)
        elif kind == "ack":
            for number in acks:
                link.ack(number)
            acks.clear()
        else:  # the connection breaks: some written bytes arrive, the rest and the acks do not
            read(value)
            wire.clear()
            acks.clear()
            connected = False
            link.reconnected()
        if not connected and kind == "send":
            connected = True  # the next message opens a new connection
            wire.extend(link.to_write())
    if not connected:
        link.reconnected()
    wire.extend(link.to_write())
    read(len(wire))
    assert delivered == list(range(1, sent + 1))
    for number in acks:
        link.ack(number)
    assert not link.unacked


def test_past_its_bound_the_oldest_is_dropped_and_the_receiver_counts_the_gap() -> None:
    link, incoming = Outgoing(limit=2), Incoming()
    for _ in range(4):
        link.add(lambda n: str(n).encode())
    assert link.dropped == 2 and list(link.unacked) == [3, 4]
    assert incoming.accept("a", 1) and incoming.accept("a", 3)
    assert not incoming.accept("a", 3) and incoming.gaps == 1 and incoming.duplicates == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["send", "read", "ack", "drop"]), max_size=60))
def test_a_link_given_up_loses_only_what_waited_and_numbers_on(events: list[str]) -> None:
    """The sender gives its peer up for dead (``drop``, its connection gone) while the peer
    lives: what waited is lost (or was delivered before), and every message sent later is
    delivered, once, in order: its numbers go on above what the peer delivered."""
    link, incoming = Outgoing(), Incoming()
    wire: list[int] = []
    delivered: list[int] = []
    given_up: set[int] = set()
    sent = 0
    for kind in events:
        if kind == "send":
            sent += 1
            link.add(lambda n: str(n).encode())
            wire += [int(data) for data in link.to_write()]
        elif kind == "read" and wire:
            number = wire.pop(0)
            if incoming.accept("a", number):
                delivered.append(number)
        elif kind == "ack":
            link.ack(incoming.last.get("a", 0))
        elif kind == "drop":
            waiting = set(link.unacked)
            assert link.drop() == len(waiting) and not link.unacked
            given_up |= waiting
            wire.clear()
            link.reconnected()
    for number in wire:
        if incoming.accept("a", number):
            delivered.append(number)
    assert delivered == sorted(set(delivered))  # once each, in order
    assert set(range(1, sent + 1)) - given_up <= set(delivered)  # only what was given up lost
