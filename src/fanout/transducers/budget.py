"""What a transducer may spend at the relay, and the errors that end it (docs/transducers.md).

A transducer runs on the relay's event loop between two pushes, like a SQL view's query
(``relay.data.tables``): one that runs long or holds much would delay every other subscriber.
So each has a budget, checked at every tick: the time one evaluation may take (a SQL one is
interrupted by the watchdog, ``relay.data.watchdog``; a Python one is measured and stopped after
the tick that overran, as Python code cannot be interrupted safely), the loop's time all the
transducers of one connection may take a second, the rows its window may hold, the rows of its
output, and the memory its DuckDB statements may use. Over any of them it is stopped, and its
subscriber gets ``Error{code: "transducer_stopped"}`` saying which; the relay's other
subscribers keep being served.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fanout.errors import FanoutError

#: Seconds one evaluation may take (as a SQL view's query, ``relay.data.tables.QUERY_TIMEOUT``).
SECONDS = 0.5
#: Rows a window may hold over all its ticks.
CELLS = 200_000
#: Rows one tick's output may have.
OUTPUT_ROWS = 50_000
#: Ticks a window may keep.
MAX_TICKS = 1_000
#: Memory the transducers' DuckDB statements may use together.
MEMORY = "256MB"
#: Seconds of the event loop one connection's transducers may take per second, and at first (as
#: its SQL pushes may: ``relay.core.throttle``).
SHARE = 0.25
BURST = 1.0


class InvalidTransducer(FanoutError, ValueError):
    """A subscription names a transducer the relay does not have, or bad parameters for it."""

    code = "invalid_transducer"


class TransducerStopped(FanoutError):
    """A transducer failed or went over its budget: its subscription ends."""

    code = "transducer_stopped"


class OverBudget(TransducerStopped):
    """A transducer went over its budget (time, window rows, output rows or memory)."""


@dataclass(frozen=True)
class Budget:
    """A transducer's limits (see the module).

    Attributes:
        seconds: one evaluation's time.
        cells: the rows its window may hold over all its ticks.
        output_rows: the rows of one tick's output.
        max_ticks: the ticks a window may keep.
        share, burst: seconds of the loop one connection's transducers may take per second,
            after a first ``burst`` (checked by the relay's core, ``relay.core.transducing``).
    """

    seconds: float = SECONDS
    cells: int = CELLS
    output_rows: int = OUTPUT_ROWS
    max_ticks: int = MAX_TICKS
    share: float = SHARE
    burst: float = BURST

    def __post_init__(self) -> None:
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"a transducer's time budget must be > 0 seconds, not {self.seconds}")
        if min(self.cells, self.output_rows, self.max_ticks) < 1:
            raise ValueError("a transducer's row and tick budgets must be >= 1")
        if not (0 < self.share <= 1 and self.burst > 0 and math.isfinite(self.burst)):
            raise ValueError(
                f"a connection's transducers need 0 < share <= 1 and burst > 0, not"
                f" {self.share} and {self.burst}"
            )

    def check_time(self, spent: float) -> None:
        """Raise :class:`OverBudget` if one evaluation took ``spent`` seconds, past the limit."""
        if spent > self.seconds:
            raise OverBudget(
                f"one evaluation took {spent:.3f} s, more than the {self.seconds:g} s a"
                " transducer may take per tick"
            )

    def check_output(self, rows: int) -> None:
        """Raise :class:`OverBudget` if an output of ``rows`` rows is past the limit."""
        if rows > self.output_rows:
            raise OverBudget(
                f"its output has {rows} rows, more than the {self.output_rows} a transducer may"
                " send per tick"
            )
