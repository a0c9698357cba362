"""Token buckets that keep one subscriber connection from taking the event loop.

* **Reads**: a subscriber that sends view changes as fast as its socket allows (tens of
  thousands a second) would take the loop from everyone else: each change is planned, may
  acquire upstream, and wakes a push. The relay reads at most ``rate`` frames a second from a
  connection, after a first ``burst``; past that it stops reading that connection for a while,
  so the sender is slowed down by TCP's flow control, not refused, and other connections are
  not slowed down with it.
* **Control time** (all connections together): a thousand connections, each within its read
  rate, could still fill the loop with view changes and leave no time for pushes. The time
  the relay spends acting on subscribers' frames is one bucket of ``control_share`` seconds a
  second (``RelayConfig``); a connection whose frame finds it overdrawn is not read until it
  is paid back, so pushes keep the rest of the loop.
* **SQL time** (``Budgets``): each SQL push runs the subscriber's query in DuckDB on the loop
  (up to the query time limit). A connection's SQL pushes may take ``share`` seconds of the
  loop per second, after a first ``burst`` seconds; a connection past that has its SQL pushes
  put off until its bucket is paid back, so one that subscribes to many different expensive
  queries slows down its own views, not everyone else's.

Pure: the caller passes the time and does the waiting.
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
