"""What a relay tells its upstream for itself and the relays below it, sans I/O (docs/cluster.md):

1. **Horizons.** Per dataset, the lowest seq an ``every`` subscription here or below may still
   ask for (``Horizon``; -1 to the stream told before when none is left or the epoch moved).
2. **Live writes.** Per dataset, whether a ``latest`` subscription here or below takes writes
   made elsewhere at once (``LiveWrites``): the publisher passes ``Written`` only to relays
   that want it.
Each is told when it changes; all are forgotten when the upstream is lost, to be told again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from fanout.relay.core.sends import UPSTREAM, Send
from fanout.wire.messages import Horizon, LiveWrites

#: (epoch, seq) of a horizon.
Mark = tuple[int, int]


class Upward:
    """What went upstream, and what the core said of its own horizons."""

    def __init__(self) -> None:
        self.own: dict[str, Mark] = {}  # the core's horizons, as it told them
        self._told: dict[str, Mark] = {}  # the horizons that went upstream
        self._live: set[str] = set()  # the datasets told wanted

    def lost(self) -> None:
        """The upstream is gone: a new one is told everything again."""
        self.own.clear()
        self._told.clear()
        self._live.clear()

    def horizons(
        self, epochs: Mapping[str, int], below: Sequence[Mapping[str, Mark]]
    ) -> list[Send]:
        """The ``Horizon`` frames that changed (rule 1).

        Args:
            epochs: each dataset's current epoch here.
            below: each relay below's horizons, by dataset.
        """
        sends: list[Send] = []
        names = set(self.own) | set(self._told)
        for marks in below:
            names |= set(marks)
        for name in sorted(names):
            epoch = epochs.get(name)
            if epoch is None:
                continue
            all_marks = [self.own.get(name)] + [marks.get(name) for marks in below]
            needed = [m[1] for m in all_marks if m is not None and m[1] >= 0 and m[0] == epoch]
            want = (epoch, min(needed)) if needed else None
            told = self._told.get(name)
            if want == told:
                continue
            if told is not None and (want is None or want[0] != told[0]):
                sends.append(Send(UPSTREAM, Horizon(name, told[0], -1)))
                del self._told[name]
            if want is not None:
                sends.append(Send(UPSTREAM, Horizon(name, *want)))
                self._told[name] = want
        return sends

    def live_writes(self, wanted: Set[str], adding: bool = False) -> list[Send]:
        """The ``LiveWrites`` frames that changed (rule 2), given every dataset wanted now (or,
        ``adding``, some more wanted)."""
        sends = [Send(UPSTREAM, LiveWrites(name)) for name in sorted(wanted - self._live)]
        gone = set() if adding else self._live - wanted
        sends += [Send(UPSTREAM, LiveWrites(name, wanted=False)) for name in sorted(gone)]
        self._live = (self._live | wanted) - gone
        return sends
