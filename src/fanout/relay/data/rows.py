"""Cutting a SQL subscription's push from its query's result (CA 3197003 [0160], "row deltas").

A query's result (``relay.data.tables.Result``) is keyed rows with a digest each. Against what the
subscriber holds (:class:`HeldRows`: the keys and digests of its last push) a push is: rows whose
key **entered**, rows whose digest changed (**updated**), keys that **left**. The first push is
the whole result, marked ``full``. Unlike region rows, a result row has no seq of its own (a join
row changes when either side does), so the digest decides.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.relay.core.transforms import Shape, apply
from fanout.relay.data.buffers import Array, Positions
from fanout.relay.data.engine import Result
from fanout.relay.data.pushes import Body, Held, compare_keys, encode_rows


class HeldRows(Held, frozen=True, gc=False):
    """What a subscriber holds of a SQL subscription (see :class:`Held`).

    Attributes:
        digests: the digest of each held row, aligned with ``keys``.
        generations: the buffer generations of the datasets the query read.
    """

    digests: npt.NDArray[np.uint64] = msgspec.field(default_factory=lambda: np.empty(0, np.uint64))
    generations: tuple[int, ...] = ()

    def signature(self) -> Hashable:
        """What determines ``keys`` and ``digests`` (for sharing bodies)."""
        return (self.view, self.generations, self.seq)

    def refreshed(self) -> Held | None:
        """Rows are told apart by their digests: the next push must be the full view."""
        return None


def cut_rows(result: Result, key: str, shape: Shape, held: HeldRows | None) -> Body:
    """The push of ``result`` (rows keyed by column ``key``) for a subscriber holding ``held``."""
    every = np.arange(len(result.keys))
    if held is None:
        entered, updated, left = every, every[:0], result.keys[:0]
    else:
        present, left = compare_keys(held.keys, result.keys)
        entered = every[~present]
        updated = every[present]
        before = held.digests[np.searchsorted(held.keys, result.keys[updated])]
        updated = updated[result.digests[updated] != before]
    return Body(
        keys=result.keys,
        anchor=None,
        full=held is None,
        changes=len(entered) + len(updated) + len(left),
        entered=encoded(result.rows, entered, shape),
        updated=encoded(result.rows, updated, shape),
        left=encode_rows({key: left}),
    )


def encoded(rows: Mapping[str, Array], positions: Positions, shape: Shape) -> msgspec.Raw:
    """The rows at ``positions``, transformed for ``shape`` and encoded."""
    taken = {name: values[positions] for name, values in rows.items()}
    return encode_rows(apply(taken, shape, None) if len(positions) else {})
