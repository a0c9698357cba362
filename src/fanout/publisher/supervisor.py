"""When a dataset's failed streaming query starts again: exponential backoff, reset by health.

A query that fails (Spark lost a Python worker, a source's server went away) is started again
from its checkpoint, which re-runs the micro-batch it was in (its offsets were not committed;
the log, the mirror and the relays each take a re-run as the same result). Pure: the caller
owns the clock and the query; ``docs/delivery.md`` says what relays see meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    """Seconds to wait before restart ``n`` (1, 2, 4, ... up to ``most``); a query that then
    ran for ``healthy_after`` seconds has its count reset, so an old failure costs nothing."""

    first: float = 1.0
    most: float = 60.0
    healthy_after: float = 60.0

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.most:
            raise ValueError(f"backoff needs 0 < first <= most, got {self.first}, {self.most}")
        if self.healthy_after < 0:
            raise ValueError(f"healthy_after must be >= 0, got {self.healthy_after}")

    def delay(self, failures: int) -> float:
        """The wait before the restart that follows ``failures`` failures in a row (>= 1)."""
        if failures < 1:
            raise ValueError(f"a restart follows at least one failure, got {failures}")
        exponent = min(failures - 1, 63)  # 2**63 seconds is past any ``most``
        return float(min(self.most, self.first * 2.0**exponent))


@dataclass
class Restarts:
    """One dataset's query: running since ``started``, or down until ``due``."""

    backoff: Backoff
    #: Failures in a row (reset once a restarted query runs ``healthy_after`` seconds).
    failures: int = 0
    #: Restarts since the process started (``publisher_query_restarts`` in /metrics).
    total: int = 0
    started: float = 0.0
    #: When the query may start again (None: it runs).
    due: float | None = None
    #: Why the last run ended (``Spark's exception``), for logs and relays.
    reason: str = field(default="")

    def failed(self, now: float, reason: str) -> float:
        """The query ended at ``now``, or could not start again (it is still down): returns the
        seconds until it starts again."""
        ran_well = self.due is None and now - self.started >= self.backoff.healthy_after
        if ran_well:
            self.failures = 0
        self.failures += 1
        wait = self.backoff.delay(self.failures)
        self.due, self.reason = now + wait, reason
        return wait

    def is_due(self, now: float) -> bool:
        """Whether a query that is down may start again at ``now``."""
        return self.due is not None and now >= self.due

    def restarted(self, now: float) -> None:
        """The query started again at ``now``."""
        self.due, self.started = None, now
        self.total += 1
