"""Latency-aware admission: how many ticks a source's next micro-batch may take (why:
docs/concepts.md, "Where the milliseconds go").

:class:`TickAdmission` fits the recent micro-batches' durations to ``fixed + per_tick x ticks``
(least squares over the last ``window``), takes the steady duration the load needs
(``fixed / (1 - rate x per_tick)``) and caps the next micro-batch at the ticks that fit in
``headroom`` times that. Under a load no size keeps up with, or before two sizes were measured,
the cap is ``headroom`` x the ticks arriving during the median recent micro-batch, ``ceiling``
at most. The source measures durations itself: between two of Spark's ``latestOffset`` calls
that admitted ticks.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

#: Times the ticks arriving during a micro-batch that the next one may take.
HEADROOM = 2.0
#: Recent micro-batches whose durations the cap follows.
WINDOW = 8


class TickAdmission:
    """The cap on the ticks of the next micro-batch, from the durations of recent ones.

    Args:
        rate: ticks per second the source produces.
        ceiling: the most ticks a micro-batch may take, whatever the durations (>= 1).
        headroom: a micro-batch may last this many times the steady one (>= 1).
        window: how many recent micro-batches' durations count.

    Raises:
        ValueError: an argument out of range.
    """

    def __init__(
        self, rate: float, ceiling: int, headroom: float = HEADROOM, window: int = WINDOW
    ) -> None:
        if rate <= 0 or ceiling < 1 or headroom < 1 or window < 1:
            raise ValueError(
                f"admission needs rate > 0, ceiling >= 1, headroom >= 1 and window >= 1"
                f" (got {rate}, {ceiling}, {headroom}, {window})"
            )
        self.rate = rate
        self.ceiling = ceiling
        self.headroom = headroom
        #: (ticks, seconds) of recent micro-batches.
        self._batches: deque[tuple[int, float]] = deque(maxlen=window)
        self._began: tuple[float, int] | None = None
        #: The last cost fitted (kept while the window holds one size: a capped steady state).
        self._fitted: tuple[float, float] | None = None

    def observe(self, ticks: int, seconds: float) -> None:
        """Record that a micro-batch of ``ticks`` ticks lasted ``seconds``."""
        self._batches.append((ticks, max(0.0, seconds)))

    def cost(self) -> tuple[float, float] | None:
        """(fixed seconds, seconds per tick) fitted to the recent micro-batches, both >= 0 (the
        last fit while they all had one size), or None before two different sizes were
        measured."""
        sizes = [float(ticks) for ticks, _ in self._batches]
        if len(set(sizes)) < 2:
            return self._fitted
        durations = [seconds for _, seconds in self._batches]
        mean_n, mean_d = statistics.fmean(sizes), statistics.fmean(durations)
        spread = sum((n - mean_n) ** 2 for n in sizes)
        slope = sum((n - mean_n) * (d - mean_d) for n, d in zip(sizes, durations, strict=True))
        per_tick = max(0.0, slope / spread)
        self._fitted = (max(0.0, mean_d - per_tick * mean_n), per_tick)
        return self._fitted

    def cap(self) -> int:
        """The most ticks the next micro-batch may take (``ceiling`` before any is measured:
        the first micro-batch catches up with Spark's start-up at once)."""
        if not self._batches:
            return self.ceiling
        fitted = self.cost()
        if fitted is not None:
            fixed, per_tick = fitted
            if per_tick <= 0:
                return self.ceiling
            if self.rate * per_tick < 1:
                steady = fixed / (1 - self.rate * per_tick)
                fits = math.floor((self.headroom * steady - fixed) / per_tick)
                return max(1, min(self.ceiling, fits))
        arriving = self.rate * statistics.median(seconds for _, seconds in self._batches)
        return max(1, min(self.ceiling, math.ceil(self.headroom * arriving)))

    def admit(self, now: float, start: int, available: int) -> int:
        """The end offset of the next micro-batch, measuring the one before from the clock.

        Call once per ``latestOffset``: ``now`` is a monotonic clock's reading, ``start`` the
        tick the micro-batch starts after and ``available`` the newest tick the clock allows.

        Returns:
            ``start`` (nothing to take) or a tick in ``(start, available]``, at most ``cap()``
            ticks after ``start``.
        """
        if self._began is not None:
            began, ticks = self._began
            self.observe(ticks, now - began)
            self._began = None
        if available <= start:
            return start
        end = min(available, start + self.cap())
        self._began = (now, end - start)
        return end
