"""A forwarding relay whose lease lapsed owns nothing (``cluster.upstreams`` rule 4): it routes
by the map without itself, and acquires anew what it holds where that map no longer routes it;
back and serving, by the map again. Checked against a brute-force owner (highest weight)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.cluster.responsibility import ResponsibilityMap, part_of, weight
from fanout.cluster.upstreams import PUBLISHER, Upstreams, acquired_anew, routing_map
from fanout.testing.catalog import AGENTS
from fanout.views import Box
from fanout.wire.messages import Acquire, Catalog, Release

NAMES = ("f0", "f1", "f2", "f3")
#: One box in each of 16 cells of the 256-unit grid.
BOXES = [Box((x + 10, y + 10), (x + 20, y + 20)) for x in range(0, 1024, 256) for y in (0, 256)]
BOXES += [Box((x + 10, y + 10), (x + 20, y + 20)) for x in range(0, 1024, 256) for y in (512, 768)]


def oracle(members: set[str], me: str, box: Box) -> str:
    """Where ``me`` acquires ``box`` from, map ``members``: the highest weight's relay if it
    sorts after ``me`` (``upstreams`` rule 1), else the publisher."""
    if not members:
        return PUBLISHER
    part = part_of("agents", box)
    owner = max(members, key=lambda name: (weight(part, name), name))
    return owner if owner > me else PUBLISHER


def held(routes: Upstreams) -> dict[Box, str]:
    return {h.view: h.upstream for h in routes.held.values()}  # type: ignore[misc]


def always(name: str) -> bool:
    return True


class Relay:
    """An ``Upstreams`` of relay ``me`` with a core's part: what a resync does (the primitives
    acquired anew released, then acquired again by the map routed by)."""

    def __init__(self, me: str, members: ResponsibilityMap, boxes: list[Box]) -> None:
        self.me, self.routing = me, members
        self.routes = Upstreams(me)
        self.routes.on_catalog(Catalog([AGENTS]))
        self.views = dict(enumerate(boxes))
        self.prims = len(self.views)
        for prim, box in self.views.items():
            self.routes.route(Acquire(prim, "agents", box), members, always)
        self.released: list[str] = []  # where each release went

    def reroute(self, after: ResponsibilityMap) -> set[Box]:
        """Route by ``after``; the boxes acquired anew."""
        before, self.routing = self.routing, after
        linked = {h.upstream for h in self.routes.held.values()} - {PUBLISHER}
        anew = acquired_anew(self.routes.held, before, after, self.me, linked.__contains__)
        assert set(anew) <= {"agents"}
        moved = {self.views[prim] for prim in anew.get("agents", ())}
        for prim in sorted(anew.get("agents", ())):  # the core's resync, in short
            self.released.append(self.routes.route(Release(prim), after, always) or "")
            box = self.views.pop(prim)
            self.prims += 1
            self.views[self.prims] = box
            self.routes.route(Acquire(self.prims, "agents", box), after, always)
        return moved


members = st.sets(st.sampled_from(NAMES), min_size=1, max_size=4)
boxes = st.lists(st.sampled_from(BOXES), min_size=1, max_size=8, unique=True)


@given(members, boxes)
@settings(max_examples=200, deadline=None)
def test_a_lapsed_relay_takes_its_parts_from_the_map_without_it_and_back_from_the_map(
    names: set[str], views: list[Box]
) -> None:
    me = sorted(names)[len(names) // 2]
    known = ResponsibilityMap({n: f"ws://{n}:1" for n in names})
    relay = Relay(me, known, views)
    assert held(relay.routes) == {box: oracle(names, me, box) for box in views}
    relay.reroute(routing_map(known, me, owning=False))  # the lease lapsed
    without = names - {me}
    assert held(relay.routes) == {box: oracle(without, me, box) for box in views}
    assert me not in held(relay.routes).values()
    relay.reroute(routing_map(known, me, owning=True))  # back, and a lease later serving
    assert held(relay.routes) == {box: oracle(names, me, box) for box in views}


@given(members, boxes)
@settings(max_examples=200, deadline=None)
def test_a_lapse_acquires_anew_only_where_a_route_changes(
    names: set[str], views: list[Box]
) -> None:
    me = sorted(names)[0]
    known = ResponsibilityMap({n: f"ws://{n}:1" for n in names})
    relay = Relay(me, known, views)
    without = names - {me}
    changes = {box for box in views if oracle(names, me, box) != oracle(without, me, box)}
    assert relay.reroute(routing_map(known, me, owning=False)) == changes  # and no other
    # Its own acquisitions of the parts now forwarded released at the publisher, the others kept.
    assert relay.released == [PUBLISHER] * len(changes)


def test_a_map_without_the_relay_itself_routes_everything_else_unchanged() -> None:
    known = ResponsibilityMap({"f0": "ws://f0:1", "f1": "ws://f1:1", "f2": "ws://f2:1"})
    assert routing_map(known, "f1", owning=True) is known
    without = routing_map(known, "f1", owning=False)
    assert set(without.members) == {"f0", "f2"}
    for box in BOXES:  # rendezvous: only f1's parts move
        owner = known.owner_of("agents", box).name
        if owner != "f1":
            assert without.owner_of("agents", box).name == owner
    alone = ResponsibilityMap({"f1": "ws://f1:1"})
    routes = Upstreams("f1")
    routes.on_catalog(Catalog([AGENTS]))
    # the only relay, lapsed: nobody to take from but the publisher
    assert routes.route(
        Acquire(1, "agents", BOXES[0]), routing_map(alone, "f1", False), always
    ) == (PUBLISHER)
