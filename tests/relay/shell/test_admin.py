"""The admin answers of a relay with workers, merged by its leader (``relay.shell.admin``'s
``merged_*``), against oracles that rebuild each figure from every process's answer by hand:
totals summed, the top subscribers of all, each batch's earliest and latest times, each
worker's coverage kept whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fanout.relay.shell.admin import (
    MOST_LINKS,
    merged_batches,
    merged_explain,
    merged_subscribers,
)

LINKS = ("fitted", "cut_to_creations", "put_off")


def _subscribers(entries: list[int]) -> dict[str, Any]:
    """A process's answer whose top subscriptions were sent ``entries`` bytes."""
    top = [{"client": i, "sub": 1, "bytes": sent} for i, sent in enumerate(entries)]
    return {
        "subscriptions": len(entries) + 3,
        "bytes": sum(entries) + 7,
        "push_cpu_seconds": 0.5 * len(entries),
        "links": {name: len(entries) + at for at, name in enumerate(LINKS)},
        "top": sorted(top, key=lambda entry: -entry["bytes"]),
    }


processes = st.lists(st.lists(st.integers(0, 10**6), max_size=6), min_size=1, max_size=4)


@given(processes, st.integers(1, 12))
def test_subscribers_merged_are_every_processs_summed_and_the_top_of_all(
    sent: list[list[int]], count: int
) -> None:
    answers = [_subscribers(entries) for entries in sent]
    own, workers = answers[0], dict(enumerate(answers[1:], 1))
    got = merged_subscribers(own, workers, count)
    assert got["subscriptions"] == sum(len(entries) + 3 for entries in sent)
    assert got["bytes"] == sum(sum(entries) + 7 for entries in sent)
    assert got["links"] == {name: sum(a["links"][name] for a in answers) for name in LINKS}
    every = sorted(
        ((sent_bytes, index) for index, entries in enumerate(sent) for sent_bytes in entries),
        reverse=True,
    )
    assert [e["bytes"] for e in got["top"]] == [sent_bytes for sent_bytes, _ in every[:count]]
    for entry in got["top"]:  # each from the process it names, as that process listed it
        assert entry["bytes"] == sent[entry["worker"]][entry["client"]]


times = st.one_of(st.none(), st.floats(0, 1000, allow_nan=False))


@st.composite
def batch_answers(draw: st.DrawFn) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The leader's batches and each worker's, some of the same (dataset, seq), some not."""
    seqs = draw(st.lists(st.integers(0, 8), unique=True, max_size=6))

    def batch(seq: int) -> dict[str, Any]:
        return {
            "dataset": draw(st.sampled_from(["agents", "cells"])),
            "seq": seq,
            "swapped": draw(st.floats(0, 1000, allow_nan=False)),
            "pushed_first": draw(times),
            "pushed_last": draw(times),
        }

    own = {"batches": [batch(seq) for seq in seqs]}
    workers = {
        index: {"batches": [batch(seq) for seq in draw(st.lists(st.integers(0, 10), max_size=6))]}
        for index in range(1, draw(st.integers(0, 3)) + 1)
    }
    return own, workers


@given(batch_answers())
def test_batches_merged_keep_the_leaders_with_the_workers_times_of_the_same_batch(
    answers: tuple[dict[str, Any], dict[int, dict[str, Any]]],
) -> None:
    own, workers = answers
    got = merged_batches(own, workers)["batches"]
    assert len(got) == len(own["batches"])
    for mine, merged in zip(own["batches"], got, strict=True):
        same = [
            theirs
            for answer in workers.values()
            for theirs in answer["batches"]
            if (theirs["dataset"], theirs["seq"]) == (mine["dataset"], mine["seq"])
        ]
        assert merged["swapped"] == mine["swapped"]  # the leader's own
        swapped = [theirs["swapped"] for theirs in same]
        assert merged["workers_swapped_first"] == (min(swapped) if swapped else None)
        assert merged["workers_swapped_last"] == (max(swapped) if swapped else None)
        for field, pick in (("pushed_first", min), ("pushed_last", max)):
            known = [b[field] for b in [mine, *same] if b[field] is not None]
            assert merged[field] == (pick(known) if known else None)


def _explained(covered: bool, fitted: int) -> dict[str, Any]:
    links = [{"client": i, "paced_bytes_per_second": 10.0 * i} for i in range(fitted)]
    return {
        "dataset": "agents",
        "held": [{"prim": 1, "dataset": "agents", "view": "box:0,0,10,10", "ready": covered}],
        "covered_by": [1] if covered else [],
        "covered": covered,
        "residual": [] if covered else [{"dataset": "agents", "view": "box:0,0,10,10"}],
        "cost": {"rows": 4},
        "links": {
            "needs_bytes_per_second": 40.0,
            "probed": fitted + 1,
            "fitted": fitted,
            "fitted_links": links,
        },
    }


@given(st.booleans(), st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=4))
def test_an_explain_merged_is_the_leaders_with_every_processs_links_and_workers_coverage(
    leader_covers: bool, workers: list[tuple[bool, int]]
) -> None:
    own = _explained(leader_covers, 2)
    theirs = {i: _explained(covered, fitted) for i, (covered, fitted) in enumerate(workers, 1)}
    got = merged_explain(own, theirs)
    assert (got["covered"], got["residual"], got["cost"]) == (
        own["covered"],
        own["residual"],
        own["cost"],
    )
    assert [(w["worker"], w["covered"]) for w in got["workers"]] == [
        (i, covered) for i, (covered, _) in enumerate(workers, 1)
    ]
    fitted = 2 + sum(count for _, count in workers)
    assert got["links"]["fitted"] == fitted
    assert got["links"]["probed"] == fitted + 1 + len(workers)
    listed = [(0, i) for i in range(2)]
    listed += [(w, i) for w, (_, count) in enumerate(workers, 1) for i in range(count)]
    assert [(link["worker"], link["client"]) for link in got["links"]["fitted_links"]] == listed[
        :MOST_LINKS
    ]


def test_an_explain_without_links_anywhere_has_none() -> None:
    own = {**_explained(True, 0), "links": None}
    assert merged_explain(own, {})["links"] is None
    assert merged_explain(own, {})["workers"] == []
