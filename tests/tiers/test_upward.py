"""What a relay tells upstream of the live writes it wants (``tiers.upward``, through
``tiers.below.Relays``): a dataset is wanted while a ``latest`` subscription here takes its live
writes or a relay below says it wants them; told when that changes, at once for a subscription
just made, and all again on a new upstream connection."""

from __future__ import annotations

from fanout.relay.core.relaycore import RelayCore, Send
from fanout.testing.catalog import AGENTS, sensors
from fanout.testing.relaycore import ready_core
from fanout.tiers.below import Relays
from fanout.tiers.upward import Upward
from fanout.views import Box
from fanout.views.topic import parse as topic
from fanout.wire.messages import Hello, LiveWrites, Subscribe, Unsubscribe

EDGE = 7  # a relay below
CLIENT = 3  # a subscriber here


def told(sends: list[Send]) -> list[LiveWrites]:
    return [send.frame for send in sends if isinstance(send.frame, LiveWrites)]


def subscribe(core: RelayCore, sub: int, dataset: str = "sensors", **asked: object) -> None:
    view = Box((0, 0), (1, 1)) if dataset == "agents" else topic("a/#")
    core.on_subscribe(CLIENT, Subscribe(sub, dataset, view, **asked), 0.0)


def test_a_dataset_is_wanted_while_a_latest_subscription_here_or_a_relay_below_takes_it() -> None:
    core = ready_core(AGENTS, sensors())
    relays = Relays(core)
    relays.welcome(EDGE, Hello(version=1, role="relay", name="edge"))
    for sub, dataset, asked in [
        (1, "sensors", {"mode": "every"}),
        (2, "sensors", {"confirmed": True}),
        (3, "agents", {}),  # a region's: no live writes
    ]:
        subscribe(core, sub, dataset, **asked)
        assert told(relays.live_writes((CLIENT, sub))) == [], (dataset, asked)
    assert told(relays.housekeeping(0.0)) == []
    subscribe(core, 4)
    assert told(relays.live_writes((CLIENT, 4))) == [LiveWrites("sensors")]  # at once
    assert told(relays.on_frame(EDGE, LiveWrites("sensors"))) == []  # wanted already
    core.on_unsubscribe(CLIENT, Unsubscribe(4))
    assert told(relays.housekeeping(1.0)) == []  # the relay below still wants it
    assert told(relays.on_frame(EDGE, LiveWrites("sensors", wanted=False))) == [
        LiveWrites("sensors", wanted=False)
    ]


def test_live_writes_are_told_again_on_a_new_upstream_connection_and_not_before() -> None:
    core = ready_core(AGENTS, sensors())
    relays = Relays(core)
    subscribe(core, 1)
    assert told(relays.housekeeping(0.0)) == [LiveWrites("sensors")]
    relays.upstream_lost()
    core.on_upstream_lost()
    assert told(relays.housekeeping(1.0)) == []  # nothing goes upstream meanwhile
    core.on_upstream_connected()
    assert told(relays.housekeeping(2.0)) == [LiveWrites("sensors")]


def test_only_what_changed_is_told() -> None:
    upward = Upward()
    assert [s.frame for s in upward.live_writes({"a", "b"})] == [LiveWrites("a"), LiveWrites("b")]
    assert upward.live_writes({"a", "b"}) == []
    assert [s.frame for s in upward.live_writes({"c"}, adding=True)] == [LiveWrites("c")]
    assert [s.frame for s in upward.live_writes({"b"})] == [
        LiveWrites("a", wanted=False),
        LiveWrites("c", wanted=False),
    ]
    upward.lost()
    assert [s.frame for s in upward.live_writes({"b"})] == [LiveWrites("b")]
