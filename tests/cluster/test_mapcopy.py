"""A worker's copy of its leader's map (``fanout.cluster.mapcopy``): the frame telling it, and
what the worker does with its own subscriptions as it is told (a real ``RelayCore``; the leader
is the test)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster import mapcopy
from fanout.cluster.mapcopy import MapCopy, telling, told
from fanout.cluster.responsibility import Assignment, ResponsibilityMap
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.testing.catalog import sensors
from fanout.testing.relaycore import ready_core
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.messages import Error, Responsibility, Subscribe, Subscribed

NAMES = ["a", "b", "c"]
#: Topic filters of twelve parts (``sensors/topic:tN``).
FILTERS = [f"t{i}/#" for i in range(12)]

maps = st.builds(
    lambda live, standby, assigned, side: ResponsibilityMap(
        {name: f"ws://{name}.example:7701" for name in live},
        side,
        frozenset(standby),
        assigned,
    ),
    st.sets(st.sampled_from(NAMES)),
    st.sets(st.sampled_from(NAMES)),
    st.dictionaries(
        st.sampled_from([f"agents/cell:{i},0" for i in range(4)]),
        st.builds(
            Assignment,
            st.sampled_from(NAMES),
            st.sampled_from(NAMES),
            st.booleans(),
            st.sampled_from(["", "box:0,0,10,10"]),
        ),
    ),
    st.sampled_from([64.0, 256.0, 1000.5]),
)


@given(maps, st.sampled_from(NAMES), st.booleans())
def test_the_map_told_is_the_map_read(table: ResponsibilityMap, me: str, serving: bool) -> None:
    """Oracle: the map itself, after the frame went over the wire as the leader sends it."""
    frame = codec.from_publisher().decode(codec.encode(telling(me, table, serving)))
    assert isinstance(frame, Responsibility)
    assert (told(frame), frame.me, frame.serving) == (table, me, serving)


class Worker:
    """A worker's core with one subscription of each filter, and what it was sent."""

    def __init__(self) -> None:
        self.core: RelayCore = ready_core(sensors())
        self.sent: list[Send] = []
        self.asked = 0
        self.answer: Responsibility | None = None
        self.copy = MapCopy(self.core, dispatch=self.sent.extend, wake=lambda: None, ask=self.ask)
        for sub, text in enumerate(FILTERS, 1):
            self.subscribe(sub, text)

    def subscribe(self, sub: int, text: str, stay: bool = False) -> Error | None:
        request = Subscribe(sub, "sensors", topic(text), stay=stay)
        refused = self.copy.redirect(request, held=False)
        if refused is None:
            sends = self.core.on_subscribe(1, request, 0.0)
            assert any(isinstance(send.message(), Subscribed) for send in sends)
        return refused

    def ask(self) -> bool:
        self.asked += 1
        if self.answer is not None:  # the leader answers on its next turn
            asyncio.get_running_loop().call_soon(self.copy.tell, self.answer)
        return True

    def ended(self) -> dict[int, Error]:
        """Subscription -> the redirect (or refusal) that ended it, as sent."""
        errors = [send.message() for send in self.sent]
        return {e.ref: e for e in errors if isinstance(e, Error) and e.ref is not None}

    def held(self) -> set[int]:
        return {held.sub for held in self.core.downstream}


def _map(*names: str) -> ResponsibilityMap:
    return ResponsibilityMap({name: f"ws://{name}.example:7701" for name in names})


async def test_a_worker_ends_the_subscriptions_a_joining_relay_takes_and_all_when_lapsed() -> None:
    worker = Worker()
    worker.copy.tell(telling("a", _map("a"), True))
    assert worker.ended() == {} and worker.held() == set(range(1, 13))

    both = _map("a", "b")
    worker.copy.tell(telling("a", both, True))
    owners = {sub: both.owner_of("sensors", topic(t)).name for sub, t in enumerate(FILTERS, 1)}
    taken = {sub for sub, owner in owners.items() if owner == "b"}
    assert taken and taken != set(owners)
    ended = worker.ended()
    assert set(ended) == taken and worker.held() == set(owners) - taken
    assert {(e.code, e.location) for e in ended.values()} == {("redirect", "ws://b.example:7701")}
    # New ones of b's parts go there, but for one asking to stay.
    (elsewhere, *_) = sorted(taken)
    refused = worker.subscribe(100, FILTERS[elsewhere - 1])
    assert refused is not None and refused.location == "ws://b.example:7701"
    assert worker.subscribe(101, FILTERS[elsewhere - 1], stay=True) is None
    assert worker.copy.redirected == 1

    # The lease lapsed: every subscription ends, sent to the map without this relay; new
    # ones too, even asked to stay; back, it serves its parts again.
    worker.sent.clear()
    worker.copy.tell(telling("a", both, False))
    assert worker.held() == set() and set(worker.ended()) == set(owners) - taken | {101}
    assert {e.location for e in worker.ended().values()} == {"ws://b.example:7701"}
    refused = worker.subscribe(102, FILTERS[min(set(owners) - taken) - 1], stay=True)
    assert refused is not None and refused.location == "ws://b.example:7701"
    worker.copy.tell(telling("a", both, True))
    assert worker.subscribe(103, FILTERS[min(set(owners) - taken) - 1]) is None


async def test_alone_in_a_lapsed_map_a_worker_refuses_for_now() -> None:
    worker = Worker()
    worker.copy.tell(telling("a", _map("a"), False))
    assert {(e.code, e.location) for e in worker.ended().values()} == {("unavailable", None)}


async def test_before_redirecting_an_http_stream_a_worker_has_its_leader_read_the_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = Worker()
    both = _map("a", "b")
    worker.copy.tell(telling("b", both, True))  # a worker of b
    mine, theirs = (min(_owned(both, name)) for name in ("b", "a"))
    request: Any = Subscribe(1, "sensors", topic(theirs))
    await worker.copy.confirm(Subscribe(1, "sensors", topic(mine)))  # served here: not asked
    assert worker.asked == 0
    worker.answer = telling("b", _map("b"), True)  # the leader reads a map where a left
    await asyncio.wait_for(worker.copy.confirm(request), 5)
    assert (worker.asked, worker.copy.confirmed) == (1, 1)
    assert worker.copy.redirect(request, held=False) is None  # served here after all

    worker.copy.tell(telling("b", _map("a", "b"), True))
    worker.answer = None  # the leader does not answer: the map as told stands
    monkeypatch.setattr(mapcopy, "REDIS_TIMEOUT", 0.05)
    await worker.copy.confirm(request)
    assert (worker.asked, worker.copy.unconfirmed) == (2, 1)


def _owned(table: ResponsibilityMap, name: str) -> set[str]:
    return {t for t in FILTERS if table.owner_of("sensors", topic(t)).name == name}
