"""A token bucket, the one limit the relay and the publisher both put on what a peer may take
of their event loop (``relay.core.throttle`` says how the relay uses it; the publisher's control
plane gives connections that sent bad input one shared bucket of loop time).

Pure: the caller passes the time and does the waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Throttle:
    """A token bucket of ``burst`` frames, refilled at ``rate`` frames a second, starting full.

    In any ``T`` seconds a reader that waits as told reads at most ``rate * T + burst + 1``
    frames (the one it is told to wait after included).
    """

    rate: float
    burst: float
    tokens: float = field(init=False)
    at: float = -math.inf

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate) and self.burst > 0):
            raise ValueError(
                f"a throttle needs rate > 0 and burst > 0, not {self.rate} and {self.burst}"
            )
        self.tokens = self.burst

    def take(self, now: float, cost: float = 1.0) -> float:
        """Count ``cost`` tokens (one frame read, seconds of SQL) spent at ``now``.

        Returns:
            Seconds to wait before spending more (0: at once).
        """
        if self.at > -math.inf:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= cost
        return 0.0 if self.tokens >= 0.0 else -self.tokens / self.rate
