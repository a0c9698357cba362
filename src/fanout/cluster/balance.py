"""Split and merge on load: when a relay of a map hands part of its responsibility to another,
and when it hands it back (CA 3197003 [0109]-[0110], [0118]-[0119]). Pure: ``cluster.splitting``
samples and asks :func:`decide`. Rules:

1. **Load.** A sample: subscriptions, pushes a second, CPU share, rows. A part weighs its
   subscriptions here.
2. **Thresholds with hysteresis.** *Over* when any ``split_above`` figure is exceeded, *under*
   when every ``merge_below`` one is below; a figure in both must merge below where it splits.
3. **Dwell.** Split (merge) only when every sample of the last ``dwell`` s is over (under); none
   for ``dwell`` s after a move.
4. **Split.** Whole parts, heaviest first, up to half the load (the heaviest alone if it is more);
   never the last part.
5. **Merge.** Every part received is handed back at once.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

#: The figures a relay's load is measured in (rule 1).
FIGURES = ("subscribers", "pushes", "cpu", "rows")
#: Seconds a condition must hold before a relay splits or merges, and between two moves.
DEFAULT_DWELL = 10.0


@dataclass(frozen=True)
class Thresholds:
    """When a relay splits and merges (rules 2-3); empty tables: never.

    Attributes:
        split_above: figure -> value a sample is over past.
        merge_below: figure -> value a sample is under below (every one named).
        dwell: seconds a condition must hold, and between two moves.
    """

    split_above: Mapping[str, float] = field(default_factory=dict)
    merge_below: Mapping[str, float] = field(default_factory=dict)
    dwell: float = DEFAULT_DWELL

    def __post_init__(self) -> None:
        """Raises:
        ValueError: an unknown figure, a value that is not a finite number >= 0, a dwell
            that is not > 0, or a figure merging at or above where it splits.
        """
        for table, values in (("split_above", self.split_above), ("merge_below", self.merge_below)):
            for figure, value in values.items():
                if figure not in FIGURES:
                    raise ValueError(
                        f"{table}: unknown figure {figure!r} (known: {', '.join(FIGURES)})"
                    )
                if isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                    raise ValueError(f"{table}: {figure} must be a number >= 0, not {value!r}")
        if not (math.isfinite(self.dwell) and self.dwell > 0):
            raise ValueError(f"the dwell time must be > 0 seconds, not {self.dwell!r}")
        for figure, below in self.merge_below.items():
            above = self.split_above.get(figure)
            if above is not None and below >= above:
                raise ValueError(
                    f"merge_below {figure}={below:g} must be less than split_above"
                    f" {figure}={above:g}, or the relay would split and merge back at once"
                )

    @property
    def on(self) -> bool:
        """Whether the relay splits or merges at all."""
        return bool(self.split_above or self.merge_below)


@dataclass(frozen=True)
class Load:
    """A relay's figures at one moment (rule 1); ``at`` in seconds of a monotonic clock."""

    at: float
    subscribers: float = 0.0
    pushes: float = 0.0
    cpu: float = 0.0
    rows: float = 0.0

    def figure(self, name: str) -> float:
        """The figure named ``name`` (one of ``FIGURES``)."""
        value: float = getattr(self, name)
        return value


@dataclass(frozen=True)
class Split:
    """Hand ``parts`` to another relay."""

    parts: tuple[str, ...]


@dataclass(frozen=True)
class Merge:
    """Hand ``parts`` (those received) back."""

    parts: tuple[str, ...]


def over(thresholds: Thresholds, sample: Load) -> bool:
    """Whether ``sample`` is past any of the split thresholds (rule 2)."""
    return any(sample.figure(name) > value for name, value in thresholds.split_above.items())


def under(thresholds: Thresholds, sample: Load) -> bool:
    """Whether ``sample`` is below every merge threshold (rule 2); never with none."""
    below = thresholds.merge_below
    return bool(below) and all(sample.figure(name) < value for name, value in below.items())


def decide(
    thresholds: Thresholds,
    samples: Sequence[Load],
    parts: Mapping[str, float],
    received: Collection[str],
    last_move: float | None,
) -> Split | Merge | None:
    """What a relay does now (rules 2-5).

    Args:
        thresholds: when to split and merge.
        samples: the relay's load, oldest first; the last is now.
        parts: the parts the relay is responsible for and holds subscriptions of, with their
            loads (>= 0).
        received: the parts it was handed by another relay (with subscriptions held or not).
        last_move: when it last split or merged (the samples' clock), None: never.

    Returns:
        A :class:`Split`, a :class:`Merge`, or None.
    """
    if not samples:
        return None
    now = samples[-1].at
    if last_move is not None and now - last_move < thresholds.dwell:
        return None
    if samples[0].at > now - thresholds.dwell:
        return None  # the samples do not reach back a dwell yet
    recent = [sample for sample in samples if sample.at >= now - thresholds.dwell]
    if all(over(thresholds, sample) for sample in recent):
        chosen = halve(parts)
        return Split(chosen) if chosen else None
    mine = tuple(sorted(received))
    if mine and all(under(thresholds, sample) for sample in recent):
        return Merge(mine)
    return None


def halve(parts: Mapping[str, float]) -> tuple[str, ...]:
    """Whole parts carrying about half the load (rule 4), in the order taken; () for fewer
    than two parts."""
    if len(parts) < 2:
        return ()
    order = sorted(parts, key=lambda part: (-parts[part], part))
    half = sum(parts.values()) / 2
    if parts[order[0]] > half:
        return (order[0],)
    chosen: list[str] = []
    taken = 0.0
    for part in order:
        if taken + parts[part] <= half:
            chosen.append(part)
            taken += parts[part]
    if len(chosen) == len(parts):  # every load 0: keep one
        chosen.pop()
    return tuple(chosen)
