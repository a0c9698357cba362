"""``every`` mode's change sets (relay/core/changesets.py): the window of change sets and what
curiosity asks for, each seq's delta against a brute-force oracle, and the memo of steps held to
its count and bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.relay.core.every_peers import SELECTING, Key, Kind, Row

from fanout.relay.core.changesets import (
    CURIOSITY_CHUNK,
    STEP_OVERHEAD,
    ChangeSet,
    History,
    Step,
    Steps,
    delta,
)
from fanout.views.members import SELECTING as SELECTING_VIEWS


def test_curiosity_is_asked_once_per_range_and_in_chunks() -> None:
    history = History()
    for seq in range(CURIOSITY_CHUNK + 10):
        history.record(ChangeSet(1, seq, seq, 0.0, {}, np.empty(0, np.int64), pure=False))
    assert history.wanted(0, trusted_after=-1) == (0, CURIOSITY_CHUNK - 1)
    history.asked(7, 0, CURIOSITY_CHUNK - 1)
    assert history.wanted(3, trusted_after=-1) is None  # already asked
    assert history.wanted(CURIOSITY_CHUNK, -1) == (CURIOSITY_CHUNK, CURIOSITY_CHUNK + 9)
    history.received(7, CURIOSITY_CHUNK - 1)
    assert not history.owns(7)


def test_the_window_is_bounded_by_rows() -> None:
    history = History(window=100, window_rows=10)
    for seq in range(5):
        rows = {"id": np.arange(4, dtype=np.int64)}
        history.record(ChangeSet(1, seq, seq, 0.0, rows, np.empty(0, np.int64)))
    assert [seq for seq in range(5) if history.get(seq, -1) is not None] == [3, 4]


def test_a_repeated_seq_keeps_its_first_change_set() -> None:
    history = History()
    pure = ChangeSet(1, 4, 40, 0.0, {}, np.empty(0, np.int64))
    history.record(pure)
    history.record(ChangeSet(1, 4, 40, 0.0, {}, np.empty(0, np.int64), pure=False))
    assert history.get(4, trusted_after=3) is pure


@pytest.mark.parametrize("kind", SELECTING, ids=lambda kind: kind.info.index)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_delta_takes_the_held_rows_to_the_view_after_the_change(kind: Kind, data) -> None:
    """Oracle: the truth inside the view before and after one change, row by row."""
    before = data.draw(st.dictionaries(kind.keys, kind.rows), label="before")
    moved = data.draw(st.dictionaries(kind.keys, kind.rows), label="moved")
    deleted = data.draw(st.sets(kind.keys), label="deleted") - set(moved)

    def inside(truth: dict[Key, Row]) -> set[Key]:
        return {k for k, r in truth.items() if kind.inside(kind.view, k, r)}

    after = {k: p for k, p in {**before, **moved}.items() if k not in deleted}
    held = kind.key_array(inside(before))
    change = ChangeSet(1, 1, 1, 0.0, kind.columns(moved), kind.key_array(deleted))
    index = tuple(kind.info.index_columns)
    assert isinstance(kind.view, SELECTING_VIEWS)
    found = delta(change, kind.info.key, kind.view, index, held)
    keys = kind.columns(moved)[kind.info.key]
    assert set(found.held.tolist()) == inside(after)
    assert set(keys[found.entered].tolist()) == inside(after) - inside(before)
    assert set(keys[found.updated].tolist()) == inside(after) & inside(before) & set(moved)
    assert set(found.left.tolist()) == inside(before) - inside(after)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 6),
    budget=st.integers(STEP_OVERHEAD, 8 * STEP_OVERHEAD),
    asks=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 40)), max_size=60),
)
def test_the_steps_memo_keeps_the_latest_steps_within_its_count_and_bytes(
    size: int, budget: int, asks: list[tuple[int, int]]
) -> None:
    """Oracle: a list of (token, cost), least recently used first, trimmed from the front while
    it is longer than ``size`` or costs more than ``budget``; a step costing more than the
    budget is never kept. A step is computed again exactly when the oracle no longer has it."""
    steps = Steps(size=size, budget=budget)
    kept: list[tuple[tuple[int, int], int]] = []
    for seq, keys in asks:
        held = np.arange(keys, dtype=np.int64)  # before and after: 8 bytes a key each
        change = ChangeSet(1, seq, seq, 0.0, {}, np.empty(0, np.int64))
        computed: list[Step] = []

        def compute(held: np.ndarray = held, computed: list[Step] = computed) -> Step:
            computed.append(Step(held.copy(), None))
            return computed[-1]

        token = (seq, keys)
        had = [entry for entry in kept if entry[0] == token]
        first = steps.get(change, "view", None, held, compute)  # type: ignore[arg-type]
        assert bool(computed) == (not had)
        kept = [entry for entry in kept if entry[0] != token]
        cost = STEP_OVERHEAD + 16 * keys
        if cost <= budget:
            kept.append((token, cost))
        while len(kept) > size or sum(c for _, c in kept) > budget:
            kept.pop(0)
        assert steps.bytes == sum(c for _, c in kept) <= budget
        again = steps.get(change, "view", None, held, compute)  # type: ignore[arg-type]
        assert (again is first) == (cost <= budget)
        if cost > budget:  # asked again: computed again, still not kept
            kept = [entry for entry in kept if entry[0] != token]
