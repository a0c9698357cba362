"""EXPLAIN against a live relay's core (``relay.core.explaining``): what it holds, what covers
a view, the residual it would ask for — the planner's dry run, checked against what subscribing
really acquires — the rules that narrowed it, and its rows, against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView, Unauthorized
from fanout.relay.core.explaining import explain
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing import batches as kit
from fanout.testing.catalog import AGENTS, sensors
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box
from fanout.views.region import Relative, Sphere
from fanout.views.sql import parse as sql
from fanout.views.text import to_text
from fanout.views.topic import parse as topic
from fanout.wire.messages import Acquire, DatasetInfo, Subscribe

from .conversations import ready_relay, subscribe

POINTS = {"k1": (1.0, 1.0), "k2": (5.0, 5.0), "k3": (9.0, 9.0)}


def relay() -> RelayCore:
    """A relay holding ``POINTS`` in one ready primitive (around 0..10)."""
    core = ready_relay(Box((0, 0), (10, 10)), **POINTS)
    core.end_epoch()
    return core


coordinate = st.floats(-5, 25, allow_nan=False)


def test_a_covered_view_names_its_primitives_and_its_rows() -> None:
    core = relay()
    said = explain(core.parts, "agents", Box((0, 0), (6, 6)), None, 5.0)
    (held,) = said["held"]
    assert held["ready"] and said["covered_by"] == [held["prim"]] and said["covered"]
    assert said["residual"] == [] and not said["narrowed"] and said["rules"] is None
    cost = said["cost"]
    assert cost["rows"] == 2 and cost["bytes_per_push"] > 0 and cost["pushes_per_second"] == 5.0
    assert cost["bytes_per_second"] == 5 * cost["bytes_per_push"]


def test_rules_narrow_the_view_explained_and_refuse_what_they_do_not_grant() -> None:
    core = relay()
    rules = {"agents": [to_text(Box((0, 0), (3, 3)))]}
    said = explain(core.parts, "agents", Box((0, 0), (6, 6)), rules, 1.0)
    assert said["narrowed"] and said["effective_view"] == to_text(Box((0, 0), (3, 3)))
    assert said["rules"] == rules and said["cost"]["rows"] == 1
    with pytest.raises(Unauthorized):
        explain(core.parts, "agents", Box((50, 50), (60, 60)), rules, 1.0)
    with pytest.raises(InvalidView, match="unknown dataset"):
        explain(core.parts, "nothing", Box((0, 0), (1, 1)), None, 1.0)
    with pytest.raises(InvalidView, match="absolute"):
        explain(core.parts, "agents", Relative(1, Sphere((0, 0), 1)), None, 1.0)


@settings(max_examples=60, deadline=None)
@given(coordinate, coordinate, st.floats(0.5, 15), st.floats(0.5, 15))
def test_the_residual_is_what_subscribing_would_acquire_and_nothing_is_acquired(
    x: float, y: float, width: float, height: float
) -> None:
    view = Box((x, y), (x + width, y + height))
    core = relay()
    before = [(p.prim, p.view) for p in core.parts.upstream]
    said = explain(core.parts, "agents", view, None, 1.0)
    assert [(p.prim, p.view) for p in core.parts.upstream] == before  # a dry run
    inside = [k for k, (px, py) in POINTS.items() if x <= px <= x + width and y <= py <= y + height]
    assert said["cost"]["rows"] == len(inside)
    acquired = subscribe(core, view, sub=5)
    assert [r["view"] for r in said["residual"]] == [to_text(a.view) for a in acquired]
    assert said["covered"] == (not acquired)


def test_a_topic_view_is_explained_by_its_kind_as_subscribing_would_plan_it() -> None:
    core = ready_core(AGENTS, sensors())
    view = topic("plant/+/temp")
    said = explain(core.parts, "sensors", view, None, 1.0)
    assert said["held"] == [] and not said["covered"]
    ask = Subscribe(1, "sensors", view, rate=10.0)
    acquired = [f for f in frames_to(core.on_subscribe(1, ask), UPSTREAM) if isinstance(f, Acquire)]
    assert [r["view"] for r in said["residual"]] == [to_text(a.view) for a in acquired]
    rows = {"topic": ["plant/1/temp", "yard/1/temp"], "value": [1.0, 2.0]}
    prims = [a.prim for a in acquired]
    core.on_batch(kit.batch(0, rows, dataset="sensors", key="topic", snapshots=prims))
    core.end_epoch()
    said = explain(core.parts, "sensors", view, None, 1.0)
    assert said["covered"] and said["covered_by"] == prims and said["residual"] == []
    assert said["cost"]["rows"] == 1


def test_it_says_whether_writes_are_shown_to_the_view_at_once() -> None:
    orders = DatasetInfo("orders", "id", {"id": "<i8", "amount": "<f8"}, "sql", ["id"])
    core = ready_core(AGENTS, sensors(), orders)
    said = lambda dataset, view: explain(core.parts, dataset, view, None, 1.0)  # noqa: E731
    assert said("sensors", topic("a/#"))["live_writes"]
    assert said("orders", sql("SELECT id FROM orders WHERE amount > 1"))["live_writes"]
    # a query not judged row by row, and region views: confirmed rows only
    assert not said("orders", sql("SELECT * FROM orders ORDER BY amount LIMIT 3"))["live_writes"]
    assert not said("agents", Box((0, 0), (6, 6)))["live_writes"]
