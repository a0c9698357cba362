"""An example of an operator-installed Python transducer, registered through the entry-point
group ``fanout.transducers`` in fanout's own pyproject.toml (docs/transducers.md).

``crossings``: an event for each row whose ``column`` goes above ``above`` (``start``) or comes
back to it or below, or leaves the view while above (``stop``), between the previous tick and
the newest. Its output, keyed by the view's key: ``event`` and the value at the newest tick
(NULL for a row that left).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fanout.transducers.budget import InvalidTransducer
from fanout.transducers.window import AGE


class Crossings:
    """``crossings`` (see the module); made from the subscriber's parameters."""

    ticks = 2

    def __init__(self, params: Mapping[str, Any]) -> None:
        column, above = params.get("column"), params.get("above")
        if set(params) != {"column", "above"} or not isinstance(column, str):
            raise InvalidTransducer("crossings takes column (a column's name) and above (a number)")
        if (
            isinstance(above, bool)
            or not isinstance(above, int | float)
            or not math.isfinite(above)
        ):
            raise InvalidTransducer(f"above must be a finite number, not {above!r}")
        self.column = column
        self.above = float(above)
        self._key = ""

    def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
        if self.column not in schema.names[1:]:
            raise InvalidTransducer(
                f"the view has no column {self.column!r} (it has {schema.names})"
            )
        self._key = schema.names[0]
        return self._key, [self._key, "event", self.column]

    def evaluate(self, history: pa.Table) -> pa.Table:
        now = self._above(history, 0)
        before = self._above(history, 1)
        keys: list[Any] = []
        events: list[str] = []
        values: list[Any] = []
        for key, (high, value) in now.items():
            if high != before.get(key, (False, None))[0]:
                keys.append(key)
                events.append("start" if high else "stop")
                values.append(value)
        for key, (high, _) in before.items():
            if high and key not in now:
                keys.append(key)
                events.append("stop")
                values.append(None)
        key_type = history.schema.field(self._key).type
        value_type = history.schema.field(self.column).type
        return pa.table(
            {
                self._key: pa.array(keys, key_type),
                "event": pa.array(events, pa.string()),
                self.column: pa.array(values, value_type),
            }
        )

    def _above(self, history: pa.Table, age: int) -> dict[Any, tuple[bool, Any]]:
        """Each row at tick ``age``: whether its value is above the threshold, and the value."""
        rows = history.filter(pc.equal(history.column(AGE), age))
        keys = rows.column(self._key).to_pylist()
        values = rows.column(self.column).to_pylist()
        return {
            key: (value is not None and value > self.above, value)
            for key, value in zip(keys, values, strict=True)
        }
