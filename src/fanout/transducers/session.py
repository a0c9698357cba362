"""One transduced subscription: its window, its transducer and what its subscriber holds of the
output (docs/transducers.md). Rules:

1. Each push or no-update the relay would send the subscription is a tick of its window
   (``transducers.window``); the transducer is evaluated on the window at every tick.
2. The output is a table keyed by the output's key: it goes out as a ``Push`` against the
   previous tick's output (entered, updated, left), or a ``NoUpdate`` if it is the same. A full
   input push (the first, or after a ``resync``) gives a full output push.
3. The evaluation is timed with the clock it is given and checked against the budget
   (``transducers.budget``); any failure of the transducer's code, duplicate output keys or
   columns other than announced, a NULL key or values that cannot travel end it with
   :class:`TransducerStopped`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import pyarrow as pa

from fanout.transducers.budget import Budget, TransducerStopped
from fanout.transducers.window import Window
from fanout.wire.arrow import to_numpy
from fanout.wire.columns import Columns, encode_columns
from fanout.wire.messages import NoUpdate, Push


class Transducer(Protocol):
    """What a transducer is: made once per subscription from its parameters, then evaluated
    on the subscription's window at every tick.

    Attributes:
        ticks: how many ticks of the view's history it reads.
    """

    ticks: int

    def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
        """The output's key and columns (key first) for a view of ``schema`` (key first; the
        window adds ``_seq``, ``_tick``, ``_age``).

        Raises:
            InvalidTransducer: the view lacks a column it needs, or its parameters do not fit.
        """
        ...

    def evaluate(self, history: pa.Table) -> pa.Table:
        """The output at the newest tick of ``history`` (the window, ``Window.table``)."""
        ...


class Session:
    """One transduced subscription (see the module).

    Attributes:
        key, columns: the output's key and columns, as ``Subscribed`` announces them.
        spent: the seconds its last evaluation took.
    """

    def __init__(
        self,
        transducer: Transducer,
        schema: pa.Schema,
        budget: Budget,
        clock: Callable[[], float],
    ) -> None:
        self._transducer = transducer
        self.key, self.columns = transducer.output(schema)
        self.window = Window(schema, transducer.ticks, budget.cells)
        self._budget = budget
        self._clock = clock
        self._held: dict[Any, bytes] | None = None  # output key -> its row's digest
        self._tick_time = 0.0
        self.spent = 0.0

    def step(self, frame: Push | NoUpdate) -> Push | NoUpdate:
        """The output frame for one input frame (rules 1-3).

        Raises:
            TransducerStopped: the transducer failed or went over its budget.
        """
        if isinstance(frame, Push):
            self._tick_time = frame.tick_time
        if self._held is None and not (isinstance(frame, Push) and frame.full):
            raise TransducerStopped("its first input is not the whole view (a full push)")
        try:
            self.window.step(frame)
            history = self.window.table()
        except (TypeError, ValueError, pa.ArrowException) as exc:  # a column changed its type
            raise TransducerStopped(f"its window cannot take this push: {exc}") from exc
        started = self._clock()
        try:
            output = self._transducer.evaluate(history)
        except TransducerStopped:
            raise
        except Exception as exc:  # operator-installed code: whatever it raises ends it
            raise TransducerStopped(f"it failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self.spent = self._clock() - started
        self._budget.check_time(self.spent)
        self._budget.check_output(output.num_rows)
        if output.column_names != self.columns:
            raise TransducerStopped(
                f"its output has columns {output.column_names}, not {self.columns} as announced"
            )
        if output.column(self.key).null_count:
            raise TransducerStopped(f"its output has a row whose key {self.key!r} is NULL")
        full = (isinstance(frame, Push) and frame.full) or self._held is None
        try:
            return self._delta(frame, output, full)
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise TransducerStopped(f"its output cannot be sent: {exc}") from exc

    def _delta(self, frame: Push | NoUpdate, output: pa.Table, full: bool) -> Push | NoUpdate:
        keys = output.column(self.key).to_pylist()
        rows = zip(*(column.to_pylist() for column in output.columns), strict=True)
        digests = {key: msgspec.msgpack.encode(row) for key, row in zip(keys, rows, strict=True)}
        if len(digests) < len(keys):
            raise TransducerStopped(
                f"its output has two rows keyed alike in column {self.key!r}; each output row"
                " needs a key of its own"
            )
        held = {} if full or self._held is None else self._held
        entered = [at for at, key in enumerate(keys) if key not in held]
        updated = [at for at, key in enumerate(keys) if key in held and held[key] != digests[key]]
        left = [key for key in held if key not in digests]
        self._held = digests
        if not (full or entered or updated or left):
            return NoUpdate(frame.sub, frame.epoch, frame.seq, frame.tick)
        type_ = output.schema.field(self.key).type
        return Push(
            frame.sub,
            frame.epoch,
            frame.seq,
            frame.tick,
            self._tick_time,
            full,
            _columns(output.take(pa.array(entered, pa.int64()))),
            _columns(output.take(pa.array(updated, pa.int64()))),
            encode_columns({self.key: to_numpy(pa.array(left, type_))}),
        )


def _columns(rows: pa.Table) -> Columns:
    return encode_columns({name: to_numpy(rows.column(name)) for name in rows.column_names})
