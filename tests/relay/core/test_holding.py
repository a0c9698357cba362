"""Subscriptions held until the catalog (``relay.core.holding``): a Hypothesis run of random
operations against a plain list of what should be held, and what the core does with them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.holding import Holding
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing.catalog import AGENTS
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box
from fanout.wire.messages import (
    Acquire,
    Catalog,
    Error,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)

VIEW = Box((0, 0), (1, 1))

operation = st.one_of(
    st.tuples(st.just("hold"), st.integers(1, 3), st.integers(1, 4), st.floats(0, 100)),
    st.tuples(st.just("drop"), st.integers(1, 3), st.none() | st.integers(1, 4)),
    st.tuples(st.just("expire"), st.floats(0, 200)),
    st.tuples(st.just("release")),
)


@settings(max_examples=300)
@given(st.lists(operation, max_size=40), st.integers(0, 6))
def test_holding_matches_a_list_of_requests_with_deadlines(operations, limit) -> None:
    holding = Holding(wait=10.0, limit=limit)
    # The oracle: [client, sub, dataset, deadline] in arrival order.
    model: list[list[object]] = []
    for step, op in enumerate(operations):
        match op:
            case ("hold", client, sub, now):
                request = Subscribe(sub, f"d{step}", VIEW)
                refused = holding.hold(client, request, now)
                old = [m for m in model if m[:2] == [client, sub]]
                if not old and len(model) >= limit:
                    assert refused is not None and refused.code == "unavailable"
                    assert refused.ref == sub
                else:
                    assert refused is None
                    model = [m for m in model if m[:2] != [client, sub]]
                    model.append([client, sub, f"d{step}", now + 10.0])
            case ("drop", client, sub):
                gone = [m for m in model if m[0] == client and sub in (None, m[1])]
                assert holding.drop(client, sub) == bool(gone)
                model = [m for m in model if m not in gone]
            case ("expire", now):
                due = [m for m in model if m[3] <= now]  # type: ignore[operator]
                refused = holding.expired(now)
                assert [(c, e.ref) for c, e in refused] == [(m[0], m[1]) for m in due]
                assert all(e.code == "unavailable" for _, e in refused)
                model = [m for m in model if m not in due]
            case ("release",):
                released = holding.release()
                assert [(h.client, h.request.sub, h.request.dataset) for h in released] == [
                    tuple(m[:3]) for m in model
                ]
                model = []
        assert len(holding) == len(model)
        for client in (1, 2, 3):
            assert holding.count(client) == sum(m[0] == client for m in model)
            for sub in (1, 2, 3, 4):
                assert holding.holds(client, sub) == any(m[:2] == [client, sub] for m in model)


def test_a_request_held_without_a_time_gets_its_deadline_at_the_first_look() -> None:
    holding = Holding(wait=30.0)
    assert holding.hold(7, Subscribe(1, "later", VIEW), None) is None
    assert holding.expired(100.0) == []  # first look: due at 130
    assert holding.expired(129.9) == []
    [(client, error)] = holding.expired(130.0)
    assert client == 7 and error.ref == 1
    assert "'later'" in error.message and "30 s" in error.message
    assert holding.expired_total == 1


# -- in the core: what a subscriber sees while the relay has no catalog ---------------------


def test_a_relay_without_a_catalog_holds_a_subscription_and_takes_it_when_the_catalog_comes() -> (
    None
):
    core = RelayCore(Policy(widen="margin"), holding=Holding(wait=30.0))
    assert core.on_subscribe(1, Subscribe(5, "agents", VIEW), 0.0) == []  # no answer yet
    assert core.on_subscribe(1, Subscribe(6, "nope", VIEW), 0.0) == []
    assert core.stats()["held"] == 2
    core.on_catalog(Catalog([AGENTS]))
    sends = core.on_upstream_connected()
    assert [type(f) for f in frames_to(sends, 1)] == [Subscribed, Error]
    assert frames_to(sends, 1)[0].sub == 5  # type: ignore[attr-defined]
    refused = frames_to(sends, 1)[1]
    assert (
        isinstance(refused, Error)
        and refused.ref == 6
        and "unknown dataset 'nope'" in (refused.message)
    )
    assert [type(f) for f in frames_to(sends, UPSTREAM)] == [Acquire]
    assert core.stats()["held"] == 0 and core.stats()["subscriptions"] == 1
    # With a catalog, an unknown dataset is refused at once, as before.
    [error] = frames_to(core.on_subscribe(1, Subscribe(7, "nope", VIEW)), 1)
    assert isinstance(error, Error) and error.code == "invalid_view"


def test_a_held_subscription_is_refused_as_unavailable_when_the_wait_is_over() -> None:
    core = RelayCore(Policy(), holding=Holding(wait=30.0))
    core.on_subscribe(1, Subscribe(5, "agents", VIEW), 100.0)
    assert frames_to(core.housekeeping(129.0), 1) == []
    [error] = frames_to(core.housekeeping(130.0), 1)
    assert isinstance(error, Error) and (error.code, error.ref) == ("unavailable", 5)
    assert core.stats()["held_refused"] == 1 and core.stats()["held"] == 0


def test_a_held_subscription_may_be_withdrawn_or_dropped_with_its_connection() -> None:
    core = RelayCore(Policy())
    core.on_subscribe(1, Subscribe(5, "agents", VIEW))
    core.on_subscribe(2, Subscribe(5, "agents", VIEW))
    [done] = frames_to(core.on_unsubscribe(1, Unsubscribe(5)), 1)
    assert isinstance(done, Unsubscribed)
    core.on_disconnect(2)
    core.on_catalog(Catalog([AGENTS]))
    assert core.on_upstream_connected() == []  # nobody was left waiting


def test_held_subscriptions_count_towards_a_connections_limit() -> None:
    core = RelayCore(Policy(), max_subscriptions=2)
    assert core.on_subscribe(1, Subscribe(1, "agents", VIEW)) == []
    assert core.on_subscribe(1, Subscribe(2, "agents", VIEW)) == []
    [error] = frames_to(core.on_subscribe(1, Subscribe(3, "agents", VIEW)), 1)
    assert isinstance(error, Error) and error.code == "bad_request"
    assert core.on_subscribe(1, Subscribe(2, "agents", Box((0, 0), (2, 2)))) == []  # a change


def test_with_the_publisher_away_known_datasets_are_served_and_unknown_ones_held() -> None:
    core = ready_core(policy=Policy(widen="margin"))
    core.on_upstream_lost()
    sends = core.on_subscribe(1, Subscribe(1, "agents", VIEW))
    assert [type(f) for f in frames_to(sends, 1)] == [Subscribed]
    assert core.on_subscribe(1, Subscribe(2, "new", VIEW)) == []
    assert core.stats()["held"] == 1
