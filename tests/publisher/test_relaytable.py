"""The publisher's registry of relays and primitives."""

from __future__ import annotations

import pytest

from fanout.publisher.relaytable import Registry, RegistryError
from fanout.views import Box

BOX = Box((0, 0), (10, 10))


def test_acquired_primitives_are_fresh_until_delivered() -> None:
    registry = Registry()
    relay = registry.add_relay("r")
    registry.acquire(relay, 1, "agents", BOX)
    plan = registry.plan("agents")
    assert plan.prims == {relay: {1: BOX}}
    assert plan.fresh == {relay: frozenset({1})}
    # a retried micro-batch (not delivered) snapshots again
    assert registry.plan("agents").fresh == {relay: frozenset({1})}
    registry.delivered(plan)
    assert registry.plan("agents").fresh == {relay: frozenset()}


def test_a_plan_is_per_dataset_and_lists_every_relay() -> None:
    registry = Registry()
    a, b = registry.add_relay("a"), registry.add_relay("b")
    registry.acquire(a, 1, "agents", BOX)
    registry.acquire(b, 1, "other", BOX)
    plan = registry.plan("agents")
    assert plan.relays == frozenset({a, b})
    assert plan.prims == {a: {1: BOX}, b: {}}


def test_versions_change_with_primitives() -> None:
    registry = Registry()
    relay = registry.add_relay("r")
    v0 = registry.plan("agents").version
    registry.acquire(relay, 1, "agents", BOX)
    v1 = registry.plan("agents").version
    registry.release(relay, 1)
    assert len({v0, v1, registry.plan("agents").version}) == 3


def test_inconsistent_requests_are_errors() -> None:
    registry = Registry()
    relay = registry.add_relay("r")
    registry.acquire(relay, 1, "agents", BOX)
    with pytest.raises(RegistryError, match="already held"):
        registry.acquire(relay, 1, "agents", BOX)
    with pytest.raises(RegistryError, match="not held"):
        registry.release(relay, 2)


def test_a_relay_holds_at_most_max_primitives_and_others_are_not_limited_by_it() -> None:
    registry = Registry(max_primitives=2)
    busy, calm = registry.add_relay("busy"), registry.add_relay("calm")
    registry.acquire(busy, 1, "agents", BOX)
    registry.acquire(busy, 2, "agents", BOX)
    with pytest.raises(RegistryError, match="holds 2 primitives, the most the publisher allows"):
        registry.acquire(busy, 3, "agents", BOX)
    registry.acquire(calm, 1, "agents", BOX)  # another relay's count is its own
    registry.release(busy, 1)
    registry.acquire(busy, 3, "agents", BOX)  # room again once one is released
    assert registry.plan("agents").prims == {busy: {2: BOX, 3: BOX}, calm: {1: BOX}}


def test_a_dropped_relay_disappears_from_plans() -> None:
    registry = Registry()
    relay = registry.add_relay("r")
    registry.acquire(relay, 1, "agents", BOX)
    registry.drop_relay(relay)
    assert registry.plan("agents").relays == frozenset()


def test_the_log_floor_is_the_lowest_horizon_of_connected_relays() -> None:
    registry = Registry()
    first, second = registry.add_relay("a"), registry.add_relay("b")
    registry.hold(first, "agents", 1, 40)
    registry.hold(second, "agents", 1, 25)
    registry.hold(second, "orders", 3, 7)
    assert registry.floor() == {("agents", 1): 25, ("orders", 3): 7}
    registry.hold(second, "agents", 1, -1)  # released
    assert registry.floor() == {("agents", 1): 40, ("orders", 3): 7}
    registry.drop_relay(first)  # gone: it holds nothing
    assert registry.floor() == {("orders", 3): 7}
    registry.hold(first, "agents", 1, 3)  # a relay that is gone is ignored
    assert registry.floor() == {("orders", 3): 7}
