"""Cutting a relay's stream for a relay below it (``tiers.cut``), against a brute-force
oracle: after each batch cut for it, the relay below holds exactly the rows of the full state
that lie inside its primitives, each as of that seq, whatever moved, entered, left or was
deleted. Which rows lie inside is given (the kinds answer it: ``tests/relay/kinds/test_below.py``);
here the oracle's own test of each row."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.core.changesets import ChangeSet
from fanout.tiers import cut
from fanout.views import Box

Rows = dict[int, tuple[float, float]]

coordinate = st.integers(0, 20).map(float)
position = st.tuples(coordinate, coordinate)
state = st.dictionaries(st.integers(0, 30), position, max_size=25)


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    x0, y0 = draw(coordinate), draw(coordinate)
    return Box((x0, y0), (x0 + draw(st.integers(0, 12)), y0 + draw(st.integers(0, 12))))


def inside(rows: Rows, views: list[Box]) -> Rows:
    """Brute force: the rows inside any view, each tested coordinate by coordinate."""
    return {
        k: (x, y)
        for k, (x, y) in rows.items()
        if any(v.lo[0] <= x <= v.hi[0] and v.lo[1] <= y <= v.hi[1] for v in views)
    }


def arrays(rows: Rows) -> dict[str, Any]:
    keys = sorted(rows)
    return {
        "id": np.array(keys, dtype=np.int64),
        "x": np.array([rows[k][0] for k in keys], dtype=np.float64),
        "y": np.array([rows[k][1] for k in keys], dtype=np.float64),
    }


def as_rows(columns: dict[str, Any]) -> Rows:
    if not columns:
        return {}
    return {
        int(k): (float(x), float(y))
        for k, x, y in zip(columns["id"], columns["x"], columns["y"], strict=True)
    }


@settings(max_examples=300, deadline=None)
@given(
    before=state,
    steps=st.lists(
        st.tuples(st.dictionaries(st.integers(0, 30), position), st.sets(st.integers(0, 30))),
        max_size=4,
    ),
    views=st.lists(boxes(), max_size=3),
)
def test_the_relay_below_holds_exactly_the_rows_inside_its_primitives(
    before: Rows, steps: list[tuple[Rows, set[int]]], views: list[Box]
) -> None:
    truth = dict(before)
    below = inside(truth, views)  # its snapshot
    held = np.array(sorted(below), dtype=np.int64)
    for seq, (upserts, asked) in enumerate(steps):
        deletes = asked - set(upserts)  # a batch never upserts and deletes one key
        change = ChangeSet(
            1, seq, seq, 0.0, arrays(upserts) if upserts else {}, np.array(sorted(deletes))
        )
        rows = as_rows(change.rows)
        mask = np.array([k in inside(rows, views) for k in sorted(rows)], dtype=bool)
        found = cut.step(change, mask, held, key="id")
        truth.update(upserts)
        for key in deletes:
            truth.pop(key, None)
        # The relay below applies it as a batch: upserts, then deletes.
        below.update(as_rows(found.upserts))
        for key in found.deletes.tolist():
            below.pop(key, None)
        assert below == inside(truth, views)
        assert set(found.held.tolist()) >= set(below)
        assert not set(found.deletes.tolist()) & set(as_rows(found.upserts))
        held = found.held


@settings(max_examples=200, deadline=None)
@given(rows=state, views=st.lists(boxes(), max_size=3), moved=state)
def test_merging_a_snapshot_keeps_its_rows_and_deletes_none_of_them(
    rows: Rows, views: list[Box], moved: Rows
) -> None:
    content = arrays(inside(rows, views))
    # A cut that deleted some of those keys and upserted others: the content wins.
    earlier = cut.Cut(arrays(moved), np.array(sorted(rows), dtype=np.int64), np.array([], int))
    merged = cut.merge(earlier, content, "id")
    assert as_rows(merged.upserts) == {**moved, **inside(rows, views)}
    assert not set(merged.deletes.tolist()) & set(inside(rows, views))
    assert set(merged.held.tolist()) == set(inside(rows, views))


keys = st.lists(st.integers(0, 40), max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    held=st.sets(st.integers(0, 40)),
    upserted=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=30),
    gone=keys,
    objects=st.booleans(),
)
def test_a_step_leaves_and_holds_the_keys_set_arithmetic_says(
    held: set[int], upserted: list[tuple[int, bool]], gone: list[int], objects: bool
) -> None:
    """What ``step`` computes, against sets: the held keys that left the primitives or were
    deleted are deleted; what it holds after is what it held, less those, plus the keys
    inside (int64 keys, and object keys as a table of strings has them)."""

    def typed(values: list[int]) -> Any:
        if objects:
            return np.array([f"k{v:02d}" for v in values], dtype=object)
        return np.array(values, dtype=np.int64)

    before = typed(sorted(held))
    rows = {"id": typed([k for k, _ in upserted])} if upserted else {}
    mask = np.array([i for _, i in upserted], dtype=bool)
    found = cut.step(ChangeSet(1, 1, 1, 0.0, rows, typed(gone)), mask, before, key="id")
    as_set = set(before.tolist())
    named = typed([k for k, _ in upserted]).tolist()
    left = {k for k, (_, i) in zip(named, upserted, strict=True) if not i}
    left = (left | set(typed(gone).tolist())) & as_set
    entered = {k for k, (_, i) in zip(named, upserted, strict=True) if i}
    assert found.deletes.tolist() == sorted(left)
    assert found.held.tolist() == sorted((as_set - left) | entered)
    assert found.held.dtype == before.dtype and found.deletes.dtype == before.dtype


@settings(max_examples=200, deadline=None)
@given(held=st.sets(st.integers(0, 40)), added=keys, objects=st.booleans())
def test_a_union_of_held_and_added_keys_is_the_sets_union_sorted(
    held: set[int], added: list[int], objects: bool
) -> None:
    """``union``: the sorted held keys and keys in any order (repeated too), as sets say."""

    def typed(values: list[int]) -> Any:
        if objects:
            return np.array([f"k{v:02d}" for v in values], dtype=object)
        return np.array(values, dtype=np.int64)

    before = typed(sorted(held))
    found = cut.union(before, typed(added))
    assert found.tolist() == sorted(set(before.tolist()) | set(typed(added).tolist()))
    assert found.dtype == before.dtype
