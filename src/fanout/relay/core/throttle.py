"""Token buckets that keep one subscriber connection from taking the event loop (why each:
docs/architecture.md, "Inside the relay"). Pure: the caller passes the time and does the waiting.

* **Reads**: at most ``rate`` frames a second from a connection after a first ``burst``; past
  that the connection is not read for a while (TCP slows the sender; nothing is refused).
* **Control time**, all connections together: ``control_share`` seconds of the loop a second
  for acting on subscribers' frames; a connection whose frame finds it overdrawn waits.
* **SQL time** (``Budgets``): one connection's SQL pushes take ``share`` seconds of the loop a
  second after a first ``burst``; past that they are put off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fanout.buckets import Throttle

#: Seconds of the event loop acting on subscribers' frames may take per second, all
#: connections together, and at first.
CONTROL_SHARE = 0.5
CONTROL_BURST = 0.5
#: Seconds of the event loop one connection's SQL pushes may take per second (``Budgets``).
SQL_SHARE = 0.25
#: Seconds they may take at first, or after a rest: two queries stopped at the default time
#: limit (0.5 s), or hundreds of ordinary ones.
SQL_BURST = 1.0


@dataclass
class Budgets:
    """A ``Throttle`` of SQL seconds per connection: ``share`` seconds a second, ``burst`` at
    first (module docstring). A connection that spent past its bucket waits until it is paid
    back; its spending is measured after the fact, so one query may overdraw it.

    Attributes:
        share: seconds of the event loop a connection's SQL pushes may take per second.
        burst: seconds they may take at first, or after a rest.
        put_off: SQL pushes put off because their connection's bucket was overdrawn.
    """

    share: float
    burst: float
    put_off: int = 0
    _buckets: dict[int, Throttle] = field(default_factory=dict)
    _until: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (0 < self.share <= 1 and self.burst > 0):
            raise ValueError(
                f"a SQL time budget needs 0 < share <= 1 and burst > 0, not {self.share} and"
                f" {self.burst}"
            )

    def until(self, client: int, now: float) -> float | None:
        """When ``client`` may run SQL again if not ``now`` (counting a put-off), else None."""
        until = self._until.get(client)
        if until is None or until <= now:
            return None
        self.put_off += 1
        return until

    def spend(self, client: int, seconds: float, now: float) -> None:
        """``client``'s SQL push, started at ``now``, took ``seconds``."""
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = self._buckets[client] = Throttle(self.share, self.burst)
        done = now + seconds
        wait = bucket.take(done, seconds)
        if wait > 0:
            self._until[client] = done + wait
        else:
            self._until.pop(client, None)

    def forget(self, client: int) -> None:
        """``client`` went away."""
        self._buckets.pop(client, None)
        self._until.pop(client, None)
