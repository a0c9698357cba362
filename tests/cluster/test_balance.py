"""When a relay splits and merges (``cluster.balance``) against brute force.

The oracles are written here from the module's rules, not from how it computes: the parts handed
over are checked against every subset of the parts (the nearest any choice of whole parts comes
to half the load), and the decision against the rules read literally over the samples.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster.balance import FIGURES, Load, Merge, Split, Thresholds, decide, halve

part_names = st.text(alphabet="abcdef0123", min_size=1, max_size=4)
part_loads = st.dictionaries(part_names, st.integers(0, 1000).map(float), max_size=8)


def best_distance(parts: dict[str, float]) -> float:
    """The nearest any nonempty proper subset of whole parts comes to half the load."""
    names, half = list(parts), sum(parts.values()) / 2
    return min(
        abs(sum(parts[name] for name in subset) - half)
        for size in range(1, len(names))
        for subset in itertools.combinations(names, size)
    )


@given(part_loads)
def test_a_split_hands_over_whole_parts_near_half_the_load_and_never_the_last(
    parts: dict[str, float],
) -> None:
    chosen = halve(parts)
    if len(parts) < 2:
        assert chosen == ()
        return
    assert chosen and len(set(chosen)) == len(chosen) < len(parts)
    assert set(chosen) <= set(parts)
    total = sum(parts.values())
    given_away = sum(parts[name] for name in chosen)
    distance, best = abs(given_away - total / 2), best_distance(parts)
    heaviest = max(parts.values())
    if heaviest > total / 2:
        # Every subset with the heaviest part is at least as far above half as it is alone,
        # every subset without it as far below: nothing comes nearer.
        assert distance == best
    else:
        left = [parts[name] for name in parts if name not in chosen]
        assert given_away <= total / 2
        assert distance <= best + min(left)


samples_at = st.lists(
    st.tuples(
        st.integers(0, 40).map(float),
        st.sampled_from([0.0, 10.0, 50.0, 90.0, 200.0]),
        st.sampled_from([0.0, 0.2, 0.9, 1.5]),
    ),
    min_size=1,
    max_size=12,
)


def literally(
    thresholds: Thresholds,
    samples: list[Load],
    parts: dict[str, float],
    received: set[str],
    last_move: float | None,
) -> str:
    """The decision as the rules say it, over the samples one by one."""
    now = samples[-1].at
    if last_move is not None and last_move > now - thresholds.dwell:
        return "none"
    if not any(sample.at <= now - thresholds.dwell for sample in samples):
        return "none"
    window = [sample for sample in samples if now - sample.at <= thresholds.dwell]

    def is_over(sample: Load) -> bool:
        return any(getattr(sample, f) > v for f, v in thresholds.split_above.items())

    def is_under(sample: Load) -> bool:
        below = thresholds.merge_below
        return bool(below) and all(getattr(sample, f) < v for f, v in below.items())

    if all(is_over(sample) for sample in window):
        return "split" if len(parts) >= 2 else "none"
    if received and all(is_under(sample) for sample in window):
        return "merge"
    return "none"


@given(
    samples_at,
    part_loads,
    st.sets(part_names, max_size=4),
    st.none() | st.integers(0, 40).map(float),
    st.sampled_from([{}, {"subscribers": 80.0}, {"cpu": 1.0}, {"subscribers": 80.0, "cpu": 1.0}]),
    st.sampled_from([{}, {"subscribers": 20.0}, {"cpu": 0.5, "subscribers": 20.0}]),
)
def test_a_relay_splits_and_merges_only_as_its_thresholds_and_dwell_say(  # noqa: PLR0917 (Hypothesis gives each drawn value as an argument)
    raw: list[tuple[float, float, float]],
    parts: dict[str, float],
    received: set[str],
    last_move: float | None,
    split_above: dict[str, float],
    merge_below: dict[str, float],
) -> None:
    thresholds = Thresholds(split_above, merge_below, dwell=10.0)
    samples = [Load(at, subscribers=subs, cpu=cpu) for at, subs, cpu in sorted(raw)]
    decision = decide(thresholds, samples, parts, received, last_move)
    expected = literally(thresholds, samples, parts, received, last_move)
    match decision:
        case Split(chosen):
            assert expected == "split" and chosen == halve(parts)
        case Merge(back):
            assert expected == "merge" and set(back) == received
        case None:
            assert expected == "none"


def test_a_relay_past_its_threshold_for_the_dwell_splits_then_waits_a_dwell() -> None:
    thresholds = Thresholds({"subscribers": 100}, {"subscribers": 30}, dwell=5.0)
    busy = [Load(float(t), subscribers=150) for t in range(7)]
    parts = {"a/cell:0,0": 60.0, "a/cell:1,0": 50.0, "a/cell:2,0": 40.0}
    assert decide(thresholds, busy[:3], parts, (), None) is None  # not a dwell yet
    assert decide(thresholds, busy, parts, (), None) == Split(("a/cell:0,0",))
    assert decide(thresholds, busy, parts, (), last_move=4.0) is None
    idle = [Load(float(t), subscribers=10) for t in range(20, 27)]
    assert decide(thresholds, idle, parts, {"a/cell:2,0"}, 4.0) == Merge(("a/cell:2,0",))
    assert decide(thresholds, idle, parts, (), 4.0) is None  # nothing received to hand back


@pytest.mark.parametrize(
    ("split_above", "merge_below", "dwell", "message"),
    [
        ({"load": 1.0}, {}, 1.0, "unknown figure 'load'"),
        ({"cpu": -1.0}, {}, 1.0, "cpu must be a number >= 0"),
        ({}, {"cpu": float("nan")}, 1.0, "cpu must be a number >= 0"),
        ({"subscribers": 10.0}, {"subscribers": 10.0}, 1.0, "must be less than split_above"),
        ({"cpu": 1.0}, {}, 0.0, "dwell time must be > 0"),
    ],
)
def test_thresholds_that_cannot_work_are_refused_with_the_figure_named(
    split_above: dict[str, float], merge_below: dict[str, float], dwell: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Thresholds(split_above, merge_below, dwell)


def test_thresholds_are_off_by_default_and_every_figure_is_a_sample_field() -> None:
    assert not Thresholds().on
    assert all(Load(0.0).figure(name) == 0.0 for name in FIGURES)
