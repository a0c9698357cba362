"""One ``latest`` subscription's view of single rows, for the live path (``relay.core.provisional``
``Lens``): whether its view selects a written row and how it shows it, its confirmed rows of some
keys, and what the push machinery believes its subscriber holds.

For kinds whose views select each row by that row alone (topic filters, object paths:
``views.members``); objects' cells, whose filters read the object's other attributes, have a
lens of their own (``relay.kinds.objectlens``); a kind without one (SQL) takes the confirmed
path alone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from fanout.relay.core.downstream import Subscription
from fanout.relay.core.provisional import Row
from fanout.relay.core.transforms import apply
from fanout.relay.data.buffers import DoubleBuffer, Mask, Positions, Table
from fanout.relay.data.pushes import members as among
from fanout.views.members import Selecting

#: Which of some rows (column -> values, aligned, every column held) a view selects, given the
#: dataset's index columns (``views.members.members``).
Selects = Callable[[Selecting, Mapping[str, Any], Sequence[str]], Mask]


class RowLens:
    """A subscription's view of rows, one at a time (``provisional.Lens``)."""

    def __init__(
        self,
        subscription: Subscription,
        buffer: DoubleBuffer,
        index: tuple[str, ...],
        selects: Selects,
    ) -> None:
        self.subscription = subscription
        self.buffer = buffer
        self.index = index
        self.selects = selects

    def admitted(
        self, rows: Mapping[Hashable, Row], pending: Mapping[Hashable, Row]
    ) -> dict[Hashable, Row]:
        """A write's whole rows by key (None: deleted) as its publisher admits them over the
        confirmed rows with ``pending`` on top: as written here.

        Raises:
            InvalidWrite: the publisher would refuse it (a kind with rules of its own).
        """
        return dict(rows)

    def show(self, rows: Mapping[Hashable, Row]) -> dict[Hashable, Row]:
        """Whole rows by key (None: deleted) as the view shows them (None: not selected)."""
        out: dict[Hashable, Row] = dict.fromkeys(rows)
        whole = [row for row in rows.values() if row is not None]
        if whole:
            table = self.buffer.active
            scratch = Table(table.key, table.wire)
            columns = {
                name: np.asarray([row[name] for row in whole], dtype=dtype)
                for name, dtype in table.dtypes.items()
            }
            scratch.upsert(columns, 0)
            out.update(self._shown(scratch, np.arange(len(scratch))))
        return out

    def confirmed(self, keys: Iterable[Hashable]) -> dict[Hashable, Row]:
        """The active state's rows of ``keys`` in the view (None: not in it)."""
        wanted: list[Any] = list(keys)
        out: dict[Hashable, Row] = dict.fromkeys(wanted)
        table = self.buffer.active
        at = table.locate(table.as_keys(wanted))
        out.update(self._shown(table, at[at >= 0]))
        return out

    def holds(self, keys: Iterable[Hashable]) -> dict[Hashable, bool]:
        """Whether the subscriber holds each key, as the push machinery believes."""
        wanted: list[Any] = list(keys)
        held = self.subscription.held
        if held is None or not wanted:
            return dict.fromkeys(wanted, False)
        found = among(self.buffer.active.as_keys(wanted), held.keys)
        return dict(zip(wanted, found.tolist(), strict=True))

    def current(self) -> bool:
        """Whether the subscription's last push was cut from the active state."""
        held = self.subscription.held
        return held is not None and held.generation == self.buffer.generation

    def dtypes(self) -> dict[str, np.dtype[np.generic]]:
        """The dtype of each column the view's rows are sent with."""
        table = self.buffer.active
        shape = self.subscription.shape
        empty = apply(table.take(np.arange(0), shape.columns), shape, None)
        return {name: values.dtype for name, values in empty.items()}

    def _shown(self, table: Table, positions: Positions) -> dict[Hashable, Row]:
        """The rows at ``positions`` the view selects, as it shows them, by key."""
        if not len(positions):
            return {}
        rows, shape = table.take(positions), self.subscription.shape
        view = cast(Selecting, self.subscription.view)  # a selecting kind's (``Views.check``)
        picked = positions[self.selects(view, rows, self.index)]
        shown = apply(table.take(picked, shape.columns), shape, None)
        keys = table.keys[picked].tolist()
        names = list(shown)
        values = [shown[name].tolist() for name in names]
        return {
            key: dict(zip(names, row, strict=True))
            for key, row in zip(keys, zip(*values, strict=True), strict=True)
        }
