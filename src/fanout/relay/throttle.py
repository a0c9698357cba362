"""How fast the relay reads one subscriber connection's frames: a token bucket.

A subscriber that sends view changes as fast as its socket allows (tens of thousands a second)
would take the event loop from everyone else: each change is planned, may acquire upstream, and
wakes a push. The relay reads at most ``rate`` frames a second from a connection, after a first
``burst``; past that it stops reading that connection for a while, so the sender is slowed down
by TCP's flow control, not refused, and other connections are not slowed down with it.

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
        if not (self.rate > 0 and math.isfinite(self.rate) and self.burst >= 1):
            raise ValueError(
                f"a throttle needs rate > 0 and burst >= 1, not {self.rate} and {self.burst}"
            )
        self.tokens = self.burst

    def take(self, now: float) -> float:
        """Count one frame read at ``now``.

        Returns:
            Seconds to wait before reading the next frame (0: read it at once).
        """
        if self.at > -math.inf:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0.0 else -self.tokens / self.rate
