"""A live tail's numbers (sources.livenumbers) against the capture's, brute force: whatever the
tail's start, the order anchors and transactions arrive in and the holding bound, every change
it numbers gets the ``_version`` the micro-batch gives it, none twice, and once anchored none is
skipped."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.publisher.sources.livenumbers import Numbering


def capture_numbers(snapshot: int, counts: list[int]) -> list[int]:
    """The oracle: transaction i's first ``_version`` as the capture numbers it (its changes
    after the snapshot's rows and every earlier transaction's)."""
    firsts, number = [], snapshot + 1
    for count in counts:
        firsts.append(number)
        number += count
    return firsts


def end(i: int) -> int:
    return 10 * (i + 1)  # transaction i ends here; a quiet anchor between is at + 5


scripts = st.tuples(
    st.integers(0, 50),  # the snapshot's rows
    st.lists(st.integers(0, 4), max_size=25),  # each transaction's changes
    st.integers(0, 270),  # the tail's start
    st.integers(1, 12),  # changes held at most
    st.randoms(use_true_random=False),
)


@given(scripts)
def test_the_tail_numbers_every_change_as_the_capture_does(script: tuple) -> None:
    snapshot, counts, start, max_held, rng = script
    firsts = capture_numbers(snapshot, counts)
    # The capture's anchors, in order: the snapshot's end, then offsets at transaction ends or
    # between two (a quiet table's slot moved on).
    anchors = [(0, snapshot)]
    for i in range(len(counts)):
        if rng.random() < 0.5:
            anchors.append((end(i) + (5 if rng.random() < 0.3 else 0), firsts[i] + counts[i] - 1))
    seen = [i for i in range(len(counts)) if end(i) > start]  # what the tail's slot sends
    tail: Numbering[int] = Numbering(start, max_held)
    numbered: dict[int, int] = {}
    events = [("t", i) for i in seen] + [("a", k) for k in range(len(anchors))]
    rng.shuffle(events)  # each kind stays in order below; the two interleave anyhow
    ts, ans = iter(seen), iter(anchors)
    for kind, _ in events:
        if kind == "t":
            i = next(ts)
            out = tail.transaction(end(i), counts[i], i)
        else:
            lsn, last = next(ans)
            assert tail.check(lsn, last)
            out = tail.anchor(lsn, last)
        for first, i in out:
            assert i not in numbered
            numbered[i] = first
    for i, first in numbered.items():
        assert first == firsts[i], (i, first, firsts[i])
    if tail.anchored:  # numbered: every transaction seen after the anchor's, none skipped
        after = sorted(numbered)
        assert after == [i for i in seen if i >= after[0]] if after else True
    else:  # never anchored: no anchor at or past where it could count from
        assert all(lsn < tail.start for lsn, _ in anchors)
        assert not numbered


@given(st.lists(st.integers(1, 3), min_size=2, max_size=10), st.integers(0, 20))
def test_an_anchor_that_contradicts_the_count_is_noticed(counts: list[int], wrong: int) -> None:
    tail: Numbering[int] = Numbering(0)
    tail.anchor(0, 0)
    for i, count in enumerate(counts):
        tail.transaction(end(i), count, i)
    right = sum(counts[:2])
    assert tail.check(end(1), right)
    assert tail.check(end(1) + 5, right)  # quiet after it
    assert tail.check(end(1), right + wrong + 1) is False
    assert tail.check(end(len(counts)) + 10, 999)  # past what it saw: it cannot tell
