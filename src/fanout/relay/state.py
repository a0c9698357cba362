"""The relay's copy of the rows its upstream primitives cover (000: [0137], state data store).

Rows are kept column-wise, sorted by key, so a batch of changes applies with a few vectorised
searches instead of a Python loop per row, and so the key sets of views come out sorted (cheap
deltas against what a subscriber holds). Each row also records the ``seq`` of the batch that last
changed it: a subscription's "updated" rows are those changed since the seq of its last push.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from fanout.wire.columns import STRING

Array = npt.NDArray[np.generic]
Keys = npt.NDArray[np.int64]


def _empty(dtype: str) -> Array:
    return np.empty(0, dtype=object if dtype == STRING else np.dtype(dtype))


class Table:
    """Rows of one dataset, keyed by an int64 key column, sorted by key."""

    def __init__(self, key: str, columns: Mapping[str, str]) -> None:
        """Create an empty table.

        Args:
            key: name of the key column (must be in ``columns``).
            columns: column name -> wire dtype (numpy dtype string or ``"str"``).
        """
        self.key = key
        self.dtypes = dict(columns)
        self.columns: dict[str, Array] = {name: _empty(dtype) for name, dtype in columns.items()}
        self.changed: npt.NDArray[np.int64] = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def keys(self) -> Keys:
        """The sorted keys."""
        return self.columns[self.key]  # type: ignore[return-value]

    def upsert(self, rows: Mapping[str, Array], seq: int) -> None:
        """Insert or overwrite rows (unique keys); every column of the table must be present.

        Raises:
            KeyError: a column is missing from ``rows``.
        """
        incoming = np.asarray(rows[self.key], dtype=np.int64)
        if not len(incoming):
            return
        keys = self.keys
        pos = np.searchsorted(keys, incoming)
        found = pos < len(keys)
        found[found] = keys[pos[found]] == incoming[found]
        at = pos[found]
        for name in self.columns:
            self.columns[name][at] = np.asarray(rows[name])[found]
        self.changed[at] = seq
        if not found.all():
            self._insert(rows, ~found, seq)

    def _insert(self, rows: Mapping[str, Array], new: npt.NDArray[np.bool_], seq: int) -> None:
        keys = np.concatenate([self.keys, np.asarray(rows[self.key], dtype=np.int64)[new]])
        order = np.argsort(keys, kind="stable")
        for name in self.columns:
            merged = np.concatenate([self.columns[name], np.asarray(rows[name])[new]])
            self.columns[name] = merged[order]
        self.changed = np.concatenate([self.changed, np.full(int(new.sum()), seq)])[order]

    def delete(self, keys: npt.ArrayLike) -> None:
        """Remove rows by key; keys not present are ignored (a delete may race a prune)."""
        gone = np.isin(self.keys, np.asarray(keys, dtype=np.int64))
        if gone.any():
            self._keep(~gone)

    def delete_where(self, mask: npt.NDArray[np.bool_]) -> None:
        """Remove the rows where ``mask`` is True."""
        if mask.any():
            self._keep(~mask)

    def _keep(self, keep: npt.NDArray[np.bool_]) -> None:
        for name in self.columns:
            self.columns[name] = self.columns[name][keep]
        self.changed = self.changed[keep]

    def column(self, name: str) -> Array:
        """One column, aligned with ``keys``."""
        return self.columns[name]

    def take(self, index: npt.NDArray[np.intp]) -> dict[str, Array]:
        """The rows at ``index`` (positions), column by column."""
        return {name: values[index] for name, values in self.columns.items()}
