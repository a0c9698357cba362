"""A mid relay whose own coverage is acquired anew (``Relays.resync``: the forward policy's map
changed, a relay it forwarded from was lost) while the upstream serves the new primitives late:
its batches lack the changes inside them meanwhile, so the relays below are told (``Resync``)
which of their primitives wait for snapshots again (``RelayCore.unready``).

Oracle: the publisher's truth, as in ``test_below``: after every seq, the edge's rows inside its
*ready* primitives are the truth's. Without the ``Resync`` the edge keeps serving rows the mid
relay no longer updates, and this fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.tiers.test_below import EDGE, Publisher, Rows, Tree, boxes, changes, position

from fanout.relay.core.relaycore import UPSTREAM, Send
from fanout.views import Box, View
from fanout.wire.messages import Acquire, Batch, Release, Resync, Subscribe


@dataclass
class Late(Publisher):
    """A publisher that serves a primitive acquired after ``late_from`` only ``lag`` seqs later
    (neither its rows nor its snapshot meanwhile), as a relay forwarded from that joins late."""

    lag: int = 0
    late_from: int = 1 << 60
    waiting: dict[int, tuple[View, int]] = field(default_factory=dict)

    def take(self, sends: list[Send]) -> None:
        for send in sends:
            match send.frame:
                case Acquire(prim=prim, view=view) if self.seq >= self.late_from:
                    self.waiting[prim] = (view, self.lag)
                case Release(prim=prim):
                    self.waiting.pop(prim, None)
                    self.prims.pop(prim, None)
                case _:
                    super().take([send])

    def step(self, changes: dict[int, tuple[float, float] | None]) -> Batch:
        for prim, (view, left) in list(self.waiting.items()):
            if left <= 0:
                del self.waiting[prim]
                self.prims[prim] = view
                self.fresh.add(prim)
            else:
                self.waiting[prim] = (view, left - 1)
        return super().step(changes)


class ToldTree(Tree):
    """The tree, its edge taking ``Resync`` as its upstream link does."""

    def __init__(self, publisher: Publisher) -> None:
        self.told: list[Resync] = []
        super().__init__(publisher)

    def down(self, sends: list[Send] | object) -> None:
        assert isinstance(sends, list)
        for send in sends:
            if send.to == EDGE and isinstance(send.frame, Resync):
                self.told.append(send.frame)
                self.edge.unready(send.frame.dataset, send.frame.prims)
        super().down([s for s in sends if not isinstance(s.frame, Resync)])

    def resync(self, some: bool = False) -> None:
        """The mid relay acquires its coverage of the dataset anew: all of it, or (``some``)
        every other primitive of it, as when a few of its parts move."""
        self.publisher.late_from = self.publisher.seq  # type: ignore[attr-defined]
        held = sorted(p.prim for p in self.mid.upstream.of(self.publisher.dataset))
        self.down(self.relays.resync(self.publisher.dataset, held[::2] if some else None))


@settings(max_examples=150, deadline=None)
@given(
    first=st.dictionaries(st.integers(0, 40), position, max_size=30),
    wanted=st.lists(boxes(), min_size=1, max_size=3),
    lag=st.integers(0, 3),
    script=st.lists(
        st.tuples(changes, st.sampled_from(["step", "resync", "some"]) | boxes()),
        min_size=1,
        max_size=10,
    ),
)
def test_the_edge_holds_the_truth_inside_its_ready_primitives_across_the_mids_resyncs(
    first: Rows, wanted: list[Box], lag: int, script: list[tuple[dict, str | Box]]
) -> None:
    tree = ToldTree(Late(lag=lag))
    tree.step(dict(first))
    for box in wanted:
        tree.acquire(box)
    tree.step({})
    for changed, action in script:
        if action in ("resync", "some"):
            tree.resync(some=action == "some")
        elif isinstance(action, Box):
            tree.acquire(action)
        tree.step(changed)
        tree.check()
    for _ in range(lag + 2):  # every primitive's snapshot comes again
        tree.step({})
        tree.check()
    assert all(p.ready for p in tree.edge.upstream)


def test_the_relay_below_is_told_once_which_primitives_wait_and_gets_their_snapshots_after() -> (
    None
):
    tree = ToldTree(Late(lag=2))
    tree.step({1: (5.0, 5.0), 2: (30.0, 30.0)})
    tree.acquire(Box((0, 0), (10, 10)))
    tree.acquire(Box((25, 25), (35, 35)))
    tree.step({})
    prims = sorted(p.prim for p in tree.edge.upstream)
    assert all(p.ready for p in tree.edge.upstream)
    tree.resync()
    (told,) = tree.told
    assert (told.dataset, sorted(told.prims)) == ("agents", prims)
    assert not any(p.ready for p in tree.edge.upstream)
    tree.resync()  # nothing of the edge's is live at the mid any more: not told again
    assert len(tree.told) == 1
    tree.sent.clear()
    for _ in range(3):
        tree.step({1: (6.0, 6.0)})
    snapshots = [p for batch in tree.sent for p in batch.snapshots]
    assert sorted(snapshots) == prims and all(p.ready for p in tree.edge.upstream)
    tree.check()


def test_only_what_the_moved_primitives_covered_waits_below() -> None:
    tree = ToldTree(Late(lag=2))
    tree.step({1: (5.0, 5.0), 2: (300.0, 300.0)})
    tree.acquire(Box((0, 0), (10, 10)))
    tree.acquire(Box((290, 290), (310, 310)))
    tree.step({})
    near, far = sorted(tree.mid.upstream, key=lambda p: p.view.lo[0])  # type: ignore[union-attr]
    (edge_near,) = [p for p in tree.edge.upstream if p.view.lo[0] < 100]  # type: ignore[union-attr]
    tree.down(tree.relays.resync("agents", {near.prim}))
    (told,) = tree.told
    assert told.prims == [edge_near.prim]  # the far one's rows never stop
    assert [p.ready for p in tree.edge.upstream] == [p is not edge_near for p in tree.edge.upstream]
    assert tree.mid.upstream.get(far.prim) is far and far.ready
    for _ in range(3):
        tree.step({1: (6.0, 6.0), 2: (301.0, 301.0)})
        tree.check()
    assert all(p.ready for p in tree.edge.upstream)


def test_a_relay_told_resync_distrusts_its_every_streams_and_forgets_snapshots_not_swapped() -> (
    None
):
    tree = ToldTree(Late())
    tree.step({1: (5.0, 5.0)})
    sends = tree.edge.on_subscribe(1, Subscribe(1, "agents", Box((0, 0), (10, 10)), mode="every"))
    tree.up([s for s in sends if s.to == UPSTREAM])
    for _ in range(2):
        tree.step({1: (6.0, 6.0)})
        tree.edge.pushes(0.0, lambda client: True)
    (subscription,) = tree.edge.downstream.of_dataset("agents")
    assert subscription.cursor is not None and subscription.cursor.trusted_after is not None
    prims = [p.prim for p in tree.edge.upstream]
    state = tree.edge.datasets["agents"]
    state.readying.extend(prims)  # snapshots written, not swapped in yet: they came before
    tree.edge.unready("agents", prims)
    assert state.readying == [] and not any(p.ready for p in tree.edge.upstream)
    assert tree.edge.upstream.pending("agents") == len(prims)
    assert subscription.cursor.trusted_after is None  # its seqs come from the log until ready


def test_a_resync_of_a_dataset_not_held_changes_nothing_and_tells_nobody() -> None:
    tree = ToldTree(Late())
    tree.step({1: (5.0, 5.0)})
    tree.acquire(Box((0, 0), (10, 10)))
    tree.step({})
    assert tree.relays.on_resync(Resync("nowhere", [1, 2])) == []
    assert all(p.ready for p in tree.edge.upstream) and all(p.ready for p in tree.mid.upstream)
