"""The double buffer's writes, each kept to be replayed on the other table after a swap
(``relay.data.buffers``, rule 3), and what the buffer has done."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from fanout.relay.data.spatial import IndexedRegion

if TYPE_CHECKING:
    from fanout.relay.data.buffers import Keys, Table


class Write(Protocol):
    """One write to the inert buffer, kept to be replayed on the other buffer after a swap."""

    @property
    def rows(self) -> int:
        """About how many rows it touches (to choose between replaying and copying)."""
        ...

    def apply(self, table: Table) -> bool:
        """Do the write on ``table``; whether it changed anything."""
        ...


@dataclass(frozen=True)
class Upsert:
    values: Mapping[str, npt.ArrayLike]
    seq: int
    rows: int

    def apply(self, table: Table) -> bool:
        table.upsert(self.values, self.seq)
        return True


@dataclass(frozen=True)
class Delete:
    keys: Keys

    @property
    def rows(self) -> int:
        return len(self.keys)

    def apply(self, table: Table) -> bool:
        return table.delete(self.keys)


@dataclass(frozen=True)
class DeleteInside:
    """Delete rows inside any of ``regions``, outside every one of ``kept``, not keyed ``keys``."""

    regions: tuple[IndexedRegion, ...]
    kept: tuple[IndexedRegion, ...]
    coordinates: tuple[str, ...]
    rows: int
    keys: Keys | None = None

    def apply(self, table: Table) -> bool:
        coords = [table.column(name) for name in self.coordinates]
        inside = np.zeros(len(table), dtype=bool)
        for region in self.regions:
            inside |= region.match(*coords)
        at = np.flatnonzero(inside)
        if len(at) and self.kept:
            near = [column[at] for column in coords]
            for region in self.kept:
                at = at[~region.match(*near)]
                near = [column[at] for column in coords]
        if len(at) and self.keys is not None and len(self.keys):
            at = at[~np.isin(table.keys[at], self.keys)]
        mask = np.zeros(len(table), dtype=bool)
        mask[at] = True
        return table.delete_where(mask)


@dataclass(frozen=True)
class RestartChanges:
    rows: int

    def apply(self, table: Table) -> bool:
        table.restart_changes()
        return len(table) > 0


@dataclass
class BufferCounters:
    """What the double buffer has done (visible in the relay's stats).

    Attributes:
        swaps: buffer swaps (epochs ended with new state).
        replays: swaps after which the new inert buffer was caught up by replaying writes.
        copies: swaps after which it was caught up by copying the active buffer.
        writes: writes applied to the inert buffer.
    """

    swaps: int = 0
    replays: int = 0
    copies: int = 0
    writes: int = 0


@dataclass
class Log:
    """Writes to replay on the other buffer, at most ``limit`` of them (else: copy it)."""

    limit: int
    writes: list[Write] = field(default_factory=list)
    overflowed: bool = False

    def __bool__(self) -> bool:
        return bool(self.writes) or self.overflowed

    def add(self, write: Write) -> None:
        if self.overflowed:
            return
        if len(self.writes) >= self.limit:
            self.writes.clear()
            self.overflowed = True  # too many to keep: the catch-up will copy instead
            return
        self.writes.append(write)

    @property
    def rows(self) -> int:
        return sum(write.rows for write in self.writes)
