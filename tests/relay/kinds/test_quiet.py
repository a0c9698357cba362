"""Box views no row changed in are pushed without a cut (relay/kinds/quiet.py): the cells said
unchanged hold the same rows as before (against every row), and a relay that skips their cut
sends exactly what one cutting every view sends."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.relay.core.conversations import batch, relay

from fanout.relay.core.relaycore import RelayCore
from fanout.relay.kinds.quiet import QuietCells
from fanout.testing.batches import rows
from fanout.views import Box
from fanout.wire.messages import NoUpdate, Subscribe, Unsubscribe

coordinate = st.one_of(
    st.floats(-30, 130, allow_nan=False), st.sampled_from([float("nan"), float("inf"), 1e300])
)
point = st.tuples(coordinate, coordinate)
# Each state: keys written (to a point, or deleted: None) since the state before.
writes = st.dictionaries(st.integers(0, 40), st.one_of(st.none(), point), max_size=12)
box = st.tuples(
    st.floats(-40, 140, allow_nan=False),
    st.floats(-40, 140, allow_nan=False),
    st.floats(0, 80, allow_nan=False),
    st.floats(0, 80, allow_nan=False),
)


def inside(rows: dict[int, tuple[float, float, int]], lo: tuple, hi: tuple) -> dict:
    return {
        key: row
        for key, row in rows.items()
        if lo[0] <= row[0] <= hi[0] and lo[1] <= row[1] <= hi[1]
    }


@settings(max_examples=200, deadline=None)
@given(first=writes, states=st.lists(writes, min_size=1, max_size=5), boxes=st.lists(box))
def test_a_box_said_quiet_holds_the_same_rows_unchanged(
    first: dict, states: list[dict], boxes: list[tuple[float, float, float, float]]
) -> None:
    cells = QuietCells()
    held: dict[int, tuple[float, float, int]] = {}  # key -> (x, y, seq last written)
    for seq, written in enumerate([first, *states]):
        before = dict(held)
        for key, where in written.items():
            if where is None:
                held.pop(key, None)
            else:
                held[key] = (*where, seq)
        keys = sorted(held)
        columns = [np.array([held[k][axis] for k in keys], dtype=np.float64) for axis in (0, 1)]
        changed = np.array([held[k][2] for k in keys], dtype=np.int64)
        cells.advance(seq, (1, seq), columns, changed)
        if seq == 0:
            assert cells.since is None
            continue
        assert cells.since == (seq - 1, seq - 1)
        lo = np.array([(b[0], b[1]) for b in boxes], dtype=np.float64).reshape(-1, 2)
        hi = lo + np.array([(b[2], b[3]) for b in boxes], dtype=np.float64).reshape(-1, 2)
        said = cells.quiet(lo, hi)
        remembered = [Box(tuple(low), tuple(high)) for low, high in zip(lo, hi, strict=True)]
        assert cells.quiet_boxes(remembered).tolist() == said.tolist()  # cached corners too
        assert cells.quiet_boxes(remembered).tolist() == said.tolist()
        for quiet, low, high in zip(said, lo.tolist(), hi.tolist(), strict=True):
            if quiet:
                assert inside(held, low, high) == inside(before, low, high)


def test_a_new_epoch_starts_the_pairs_again() -> None:
    cells = QuietCells()
    columns = [np.array([1.0]), np.array([1.0])]
    cells.advance(1, (1, 5), columns, np.array([5]))
    cells.advance(2, (1, 6), columns, np.array([5]))
    assert cells.since == (1, 5)
    assert cells.quiet(np.array([[0.0, 0.0]]), np.array([[2.0, 2.0]])).tolist() == [True]
    cells.advance(3, (2, 9), columns, np.array([-1]))
    assert cells.since is None
    assert cells.quiet(np.array([[0.0, 0.0]]), np.array([[2.0, 2.0]])).tolist() == [False]


def covered(cutting_all: bool) -> RelayCore:
    """A relay holding the world (0..100 on each axis), its coverage ready."""
    core = relay()
    if cutting_all:
        core.parts.kinds["agents"].quiet_views = False  # type: ignore[attr-defined]
    core.on_subscribe(99, Subscribe(99, "agents", Box((-50, -50), (150, 150)), rate=1000.0))
    return core


def idle_but(busy: set[int]) -> Callable[[int], bool]:
    return lambda client: client not in busy


views = st.lists(st.tuples(st.integers(1, 4), box), min_size=1, max_size=8)  # (client, box) each
moves = st.dictionaries(
    st.integers(1, 30),
    st.one_of(st.none(), st.tuples(st.floats(0, 100), st.floats(0, 100))),
    max_size=6,
)


@settings(max_examples=120, deadline=None)
@given(
    subscribed=views,
    steps=st.lists(
        st.tuples(moves, st.sets(st.integers(1, 4)), st.booleans(), st.integers(0, 7)),
        max_size=8,
    ),
)
def test_skipping_quiet_views_sends_what_cutting_every_view_sends(
    subscribed: list[tuple[int, tuple[float, float, float, float]]],
    steps: list[tuple[dict, set[int], bool, int]],
) -> None:
    cores = [covered(cutting_all=False), covered(cutting_all=True)]
    first = rows(**{f"k{key}": (key * 3.0, 100 - key * 3.0) for key in range(1, 31)})
    for core in cores:
        prims = [p.prim for p in core.upstream.of("agents")]
        core.on_batch(batch(0, first, snapshots=prims))
        for sub, (client, (x, y, w, h)) in enumerate(subscribed, start=1):
            core.on_subscribe(client, Subscribe(sub, "agents", Box((x, y), (x + w, y + h))))
    epoch = 1
    for seq, (moved, busy, new_epoch, dropped) in enumerate(steps, start=1):
        epoch += new_epoch
        upserts = {f"k{k}": where for k, where in moved.items() if where is not None}
        deletes = [k for k, where in moved.items() if where is None]
        sent = []
        for core in cores:
            if dropped < len(subscribed):  # a view changed or dropped between states
                core.on_unsubscribe(subscribed[dropped][0], Unsubscribe(dropped + 1))
            core.on_batch(batch(seq, rows(**upserts) if upserts else None, deletes, epoch=epoch))
            sends = core.pushes(float(seq), idle_but(busy))
            sent.append([(s.to, s.frame) for s in sends if s.to != 0])
        assert sent[0] == sent[1]


def test_a_view_far_from_every_change_is_not_cut(monkeypatch) -> None:
    core = covered(cutting_all=False)
    kind = core.parts.kinds["agents"]
    prims = [p.prim for p in core.upstream.of("agents")]
    diagonal = {f"k{key}": (2.0 * key, 2.0 * key) for key in range(1, 41)}
    core.on_batch(batch(0, rows(**diagonal), snapshots=prims))
    core.on_subscribe(1, Subscribe(1, "agents", Box((80, 80), (100, 100))))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    core.pushes(0.0, lambda c: True)
    unchanged = []
    cut_boxes = kind._cut_boxes  # type: ignore[attr-defined]
    monkeypatch.setattr(
        kind, "_cut_boxes", lambda due: unchanged.append(len(due)) or cut_boxes(due)
    )
    core.on_batch(batch(1, rows(k1=(2, 2))))
    sent = {s.to: s.frame for s in core.pushes(1.0, lambda c: True)}
    assert sent[1] == NoUpdate(1, 1, 1, 10)
    assert not isinstance(sent[2], NoUpdate)
    assert unchanged == [2]  # the big view (client 99) and client 2's: not client 1's
