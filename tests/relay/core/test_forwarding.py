"""Subscribers' writes forwarded by a relay (relay/core/forwarding.py): who gets which answer."""

from __future__ import annotations

from fanout.relay.core.forwarding import Forwarder
from fanout.wire.messages import Error, Publish, Published


def test_answers_go_back_to_the_writer_under_its_req() -> None:
    forwarder = Forwarder()
    one = forwarder.forward(1, Publish(5, "pps"), connected=True)
    two = forwarder.forward(2, Publish(5, "pps"), connected=True)
    assert isinstance(one, Publish) and isinstance(two, Publish)
    assert one.req < 0 and two.req < 0 and one.req != two.req
    assert not forwarder.answers(Published(7, 1, 1)) and not forwarder.answers(Error("x", "y", 3))
    assert forwarder.answer(Published(two.req, 10, 12)) == (2, Published(5, 10, 12))
    assert forwarder.answers(Error("bad_request", "no", ref=one.req))
    assert forwarder.answer(Error("bad_request", "no", ref=one.req)) == (
        1,
        Error("bad_request", "no", ref=5),
    )
    assert len(forwarder) == 0


def test_without_a_publisher_or_past_the_limit_writes_are_refused_and_lost_ones_told() -> None:
    forwarder = Forwarder(limit=1)
    refused = forwarder.forward(1, Publish(3, "pps"), connected=False)
    assert isinstance(refused, Error) and (refused.code, refused.ref) == ("unavailable", 3)
    assert isinstance(forwarder.forward(1, Publish(4, "pps"), connected=True), Publish)
    full = forwarder.forward(2, Publish(9, "pps"), connected=True)
    assert isinstance(full, Error) and full.ref == 9 and "1 writes at most" in full.message
    [(client, lost)] = forwarder.lost()
    assert (client, lost.code, lost.ref) == (1, "unavailable", 4)
    assert "may or may not be applied" in lost.message
    assert len(forwarder) == 0
