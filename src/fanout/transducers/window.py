"""A view's recent history at the relay: its content at each of its last ticks, rebuilt from the
pushes its subscriber would have been sent (CA 3197003 [0128]; docs/transducers.md). Rules:

1. A ``Push`` moves the content to its tick (a ``full`` one replaces it; otherwise its ``left``
   and ``updated`` keys go, its ``updated`` and ``entered`` rows come); a ``NoUpdate`` is a tick
   whose content is the previous one's. Each is one tick of the window.
2. The window keeps the last ``ticks`` ticks, newest last; a transducer sees them as one table,
   the view's columns plus ``_seq``, ``_tick`` and ``_age`` (0: the newest tick, 1: the one
   before, ...).
3. **Bounded**: the rows the window holds, over all its ticks, never exceed ``cells``; a push
   that would take it past raises :class:`OverBudget` (the transducer is stopped).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fanout.transducers.budget import OverBudget
from fanout.wire.arrow import to_arrow
from fanout.wire.columns import BYTES, DATE, STRING, TIMESTAMP, Columns, decode_columns
from fanout.wire.messages import NoUpdate, Push

#: The columns a window adds to the view's.
SEQ, TICK, AGE = "_seq", "_tick", "_age"


@dataclass(frozen=True)
class Tick:
    """The view's content at one tick (``rows``: an Arrow table keyed by the view's key)."""

    seq: int
    tick: int
    rows: pa.Table


class Window:
    """The view's content at each of its last ``ticks`` ticks (see the module).

    Attributes:
        schema: the view's columns, key first (a type is ``null`` where it is not known until
            rows come: a SQL view's computed columns).
        key: the view's key column.
        ticks: how many ticks it keeps.
        cells: the rows it may hold over all its ticks.
    """

    def __init__(self, schema: pa.Schema, ticks: int, cells: int) -> None:
        self.schema = schema
        self.key = schema.names[0]
        self.ticks = ticks
        self.cells = cells
        self._kept: deque[Tick] = deque()
        self._rows = schema.empty_table()  # the content at the newest tick

    @property
    def kept(self) -> list[Tick]:
        """The ticks kept, oldest first."""
        return list(self._kept)

    @property
    def newest(self) -> Tick | None:
        """The newest tick, if any."""
        return self._kept[-1] if self._kept else None

    def step(self, frame: Push | NoUpdate) -> Tick:
        """Move the view to ``frame``'s tick (rule 1) and keep it; returns the new tick.

        Raises:
            OverBudget: the window would hold more than ``cells`` rows.
            ProtocolError: the push's columns do not decode.
        """
        if isinstance(frame, Push):
            self._rows = self._apply(frame)
        tick = Tick(frame.seq, frame.tick, self._rows)
        self._kept.append(tick)
        while len(self._kept) > self.ticks:
            self._kept.popleft()
        held = sum(kept.rows.num_rows for kept in self._kept)
        if held > self.cells:
            raise OverBudget(
                f"its window holds {held} rows over {len(self._kept)} ticks, more than the"
                f" {self.cells} a transducer may hold; narrow the view or ask fewer ticks"
            )
        return tick

    def _apply(self, push: Push) -> pa.Table:
        entered = self._table(push.entered)
        if push.full:
            return entered
        updated, left = self._table(push.updated), self._table(push.left)
        gone = pa.concat_tables(
            [left.select([0]), updated.select([0])], promote_options="permissive"
        )
        column = self._rows.column(0)
        kept = self._rows.filter(pc.invert(pc.is_in(column, gone.column(0).cast(column.type))))
        state = pa.concat_tables([kept, updated, entered], promote_options="permissive")
        return state.combine_chunks()  # else its chunks pile up, a few a push, and slow it all

    def _table(self, payload: Columns) -> pa.Table:
        """A push's rows as Arrow, NULL where masked, with every column of the view."""
        decoded = decode_columns(payload)
        count = payload.length
        columns = {}
        for field in self.schema:
            values = decoded.get(field.name)
            columns[field.name] = (
                pa.nulls(count, field.type) if values is None else to_arrow(values)
            )
        return pa.table(columns)

    def table(self) -> pa.Table:
        """Every tick kept, as one table: the view's columns, ``_seq``, ``_tick``, ``_age``."""
        parts = []
        newest = len(self._kept) - 1
        for at, kept in enumerate(self._kept):
            count = kept.rows.num_rows
            parts.append(
                kept.rows.append_column(SEQ, _repeat(kept.seq, count, pa.int64()))
                .append_column(TICK, _repeat(kept.tick, count, pa.int64()))
                .append_column(AGE, _repeat(newest - at, count, pa.int32()))
            )
        if not parts:
            empty = self._rows.slice(0, 0)
            return (
                empty.append_column(SEQ, pa.array([], pa.int64()))
                .append_column(TICK, pa.array([], pa.int64()))
                .append_column(AGE, pa.array([], pa.int32()))
            )
        return pa.concat_tables(parts, promote_options="permissive")


def _repeat(value: int, count: int, type_: pa.DataType) -> pa.Array:
    """``count`` times ``value``, made in bulk."""
    return pa.array(np.full(count, value), type_)


def view_schema(
    columns: Sequence[str], types: Mapping[str, str], precision: str = "float64"
) -> pa.Schema:
    """The Arrow schema of a view's rows, key first, from its columns' wire dtypes (``types``,
    a catalog's) and the precision its transform sends floats in; ``null`` where not known (a
    SQL view's computed columns: typed by the rows that come), the key ``string`` then (a joined
    SQL view's ``_key``)."""
    fields = []
    for at, name in enumerate(columns):
        wire = types.get(name)
        type_ = _arrow_type(wire) if wire is not None else None
        if type_ is not None and pa.types.is_floating(type_) and precision != "float64":
            type_ = pa.float32() if precision == "float32" else pa.int64()
        fields.append(pa.field(name, type_ or (pa.string() if at == 0 else pa.null())))
    return pa.schema(fields)


def _arrow_type(wire: str) -> pa.DataType | None:
    special = {
        STRING: pa.string(),
        BYTES: pa.binary(),
        TIMESTAMP: pa.timestamp("us", tz="UTC"),
        DATE: pa.date32(),
    }
    if wire in special:
        return special[wire]
    try:
        return pa.from_numpy_dtype(np.dtype(wire))
    except (TypeError, ValueError, pa.ArrowNotImplementedError):
        return None  # decimals: typed by their rows
