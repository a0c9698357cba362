"""Per-relay delivery of one micro-batch (CA 3197003 [0134]-[0137]).

For every micro-batch the publisher builds exactly one ``Batch`` per connected relay — empty ones
too, so a relay sees every ``seq`` and a gap is visible — stamped (dataset, epoch, seq = Spark's
batch id, tick). A batch holds:

* upserts: changed rows inside the relay's primitives, plus, for primitives acquired since the
  last batch, a snapshot of their whole content as of this batch's tick;
* deletes: keys the relay holds that changed and are now outside all its primitives.

To know what a relay holds, the publisher keeps per relay the sorted keys it has sent and not yet
deleted (its *checkout*, as game servers track per-client interest). It grows with relays and
their coverage, never with subscribers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fanout.wire.arrow import to_numpy
from fanout.wire.columns import Columns, encode_columns
from fanout.wire.messages import Batch

Keys = npt.NDArray[np.int64]
EMPTY_KEYS: Keys = np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Stamp:
    """Where a micro-batch sits in the stream."""

    dataset: str
    epoch: int
    seq: int
    tick: int
    tick_time: float


def rows_by_relay(matched: pa.Table | None) -> dict[int, pa.Table]:
    """Split matched rows (with a ``_relay`` column) into one table per relay.

    The ``_``-prefixed matching columns are dropped.
    """
    if matched is None or matched.num_rows == 0:
        return {}
    relays = matched.column("_relay").to_numpy()
    order = np.argsort(relays, kind="stable")
    relays = relays[order]
    table = matched.take(pa.array(order)).drop_columns(
        [name for name in matched.column_names if name.startswith("_")]
    )
    starts = np.flatnonzero(np.r_[True, relays[1:] != relays[:-1]])
    ends = np.r_[starts[1:], len(relays)]
    return {int(relays[s]): table.slice(s, e - s) for s, e in zip(starts, ends, strict=True)}


def unique_rows(parts: list[pa.Table], key: str) -> pa.Table | None:
    """Concatenate tables and keep one row per key (a row can match several primitives)."""
    parts = [part for part in parts if part.num_rows]
    if not parts:
        return None
    # Tables from Spark and from the mirror may differ in their fields' nullability only.
    table = pa.concat_tables(parts, promote_options="default")
    _, first = np.unique(table.column(key).to_numpy(), return_index=True)
    return table.take(pa.array(np.sort(first)))


class Checkouts:
    """What each relay holds: the sorted keys sent to it and not deleted since."""

    def __init__(self) -> None:
        self._held: dict[int, Keys] = {}

    def held(self, relay: int) -> Keys:
        """Keys currently held by ``relay``."""
        return self._held.get(relay, EMPTY_KEYS)

    def forget_except(self, relays: frozenset[int]) -> None:
        """Drop the checkouts of relays that are gone."""
        for relay in set(self._held) - relays:
            del self._held[relay]

    def settle(self, relay: int, changed: Keys, upserted: Keys) -> Keys:
        """Record a batch for ``relay``; returns the keys it must delete.

        Args:
            relay: the relay.
            changed: sorted unique keys that changed in this micro-batch (anywhere).
            upserted: keys sent to the relay in this batch.

        Returns:
            Keys the relay holds that changed and were not re-sent: they left its primitives.
        """
        # Every set here is sorted, so membership is a binary search (O(held x log changed))
        # rather than the sort of held + changed that np.intersect1d does, once per relay.
        held = self.held(relay)
        sent = np.unique(upserted)
        touched = held[in_sorted(held, changed)]
        deletes = touched[~in_sorted(touched, sent)]
        remaining = held[~in_sorted(held, deletes)]
        added = sent[~in_sorted(sent, remaining)]
        if len(remaining) == 0:  # also keeps the keys' dtype (EMPTY_KEYS is int64, keys may be str)
            self._held[relay] = added
        else:
            self._held[relay] = np.insert(remaining, np.searchsorted(remaining, added), added)
        return deletes


def in_sorted(values: Keys, sorted_keys: Keys) -> npt.NDArray[np.bool_]:
    """Which of ``values`` are in ``sorted_keys`` (ascending): ``np.isin`` for sorted sets."""
    if len(sorted_keys) == 0 or len(values) == 0:
        return np.zeros(len(values), dtype=np.bool_)
    found = np.searchsorted(sorted_keys, values)
    found[found == len(sorted_keys)] = 0
    hits: npt.NDArray[np.bool_] = sorted_keys[found] == values
    return hits


def to_columns(table: pa.Table | None, columns: list[str]) -> Columns:
    """Encode an Arrow table's ``columns`` for the wire (an absent table is zero rows)."""
    if table is None:
        return Columns()
    return encode_columns({name: to_numpy(table.column(name)) for name in columns})


def build_batches(
    *,
    stamp: Stamp,
    key: str,
    columns: list[str],
    relays: frozenset[int],
    changed: Keys,
    matched: Mapping[int, pa.Table],
    snapshots: Mapping[int, pa.Table],
    fresh: Mapping[int, frozenset[int]],
    checkouts: Checkouts,
) -> dict[int, Batch]:
    """One ``Batch`` per relay for this micro-batch; updates the checkouts.

    Args:
        stamp: the micro-batch's position.
        key: the key column.
        columns: the dataset's columns, in wire order.
        relays: every connected relay (each gets a batch, possibly empty).
        changed: sorted unique keys changed in this micro-batch.
        matched: relay -> changed rows inside its primitives.
        snapshots: relay -> current rows inside its fresh primitives.
        fresh: relay -> primitives whose snapshot is included.
        checkouts: what each relay holds; updated here.
    """
    checkouts.forget_except(relays)
    batches: dict[int, Batch] = {}
    for relay in sorted(relays):
        parts = [t for t in (matched.get(relay), snapshots.get(relay)) if t is not None]
        upserts = unique_rows(parts, key)
        upserted = EMPTY_KEYS if upserts is None else upserts.column(key).to_numpy()
        deletes = checkouts.settle(relay, changed, upserted)
        batches[relay] = Batch(
            dataset=stamp.dataset,
            epoch=stamp.epoch,
            seq=stamp.seq,
            tick=stamp.tick,
            tick_time=stamp.tick_time,
            upserts=to_columns(upserts, columns),
            deletes=encode_columns({key: deletes}),
            snapshots=sorted(fresh.get(relay, frozenset())),
        )
    return batches


BatchSink = Callable[[dict[int, Batch]], None]
