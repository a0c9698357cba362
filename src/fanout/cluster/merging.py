"""One batch from the pieces of one seq that several upstreams sent (``cluster.assembly``).

Every piece of a seq describes the same state of the dataset, the publisher's at that seq, each
for the part its upstream serves: its upserts are rows as they are at that seq, its deletes are
keys deleted *or gone out of that part*. So in the batch made of them:

* a row upserted by several pieces (parts that overlap) is one row (they agree; the last
  piece's copy is kept: a re-stamp's snapshot follows its upstream's piece of the same seq);
* a key deleted by one piece but upserted by another is not deleted: it left one part for
  another, and the batch's deletes apply after its upserts (``relay.data.intake``);
* snapshots are every piece's, so that each primitive's old rows are dropped before the
  batch's rows are applied.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fanout.wire.columns import Columns, decode_columns, encode_columns
from fanout.wire.messages import Batch

Array = npt.NDArray[np.generic]


def merge_pieces(pieces: Sequence[Batch], key: str) -> Batch:
    """The one batch of a seq made of its ``pieces`` (all of one dataset and stamp).

    Args:
        pieces: one or more pieces, in the order they came.
        key: the dataset's key column.

    Returns:
        The first piece itself when it is the only one, else the batch of them all.

    Raises:
        ValueError: the pieces are of different datasets or stamps, or none is given.
    """
    if not pieces:
        raise ValueError("no pieces to merge")
    first = pieces[0]
    if len(pieces) == 1:
        return first
    for piece in pieces[1:]:
        if (piece.dataset, piece.epoch, piece.seq) != (first.dataset, first.epoch, first.seq):
            raise ValueError(
                f"pieces of {first.dataset} {first.epoch}/{first.seq} and"
                f" {piece.dataset} {piece.epoch}/{piece.seq} cannot be merged"
            )
    upserts = _last_by_key([decode_columns(p.upserts) for p in pieces if p.upserts.length], key)
    deleted = [decode_columns(p.deletes)[key] for p in pieces if p.deletes.length]
    deletes = _keys_not_in(_concatenate(deleted), upserts.get(key))
    snapshots = list(dict.fromkeys(prim for piece in pieces for prim in piece.snapshots))
    return Batch(
        first.dataset,
        first.epoch,
        first.seq,
        first.tick,
        first.tick_time,
        upserts=encode_columns(upserts) if upserts else Columns(),
        deletes=encode_columns({key: deletes})
        if deletes is not None and len(deletes)
        else Columns(),
        snapshots=snapshots,
    )


def _concatenate(arrays: Sequence[Array]) -> Array | None:
    if not arrays:
        return None
    if any(isinstance(array, np.ma.MaskedArray) for array in arrays):
        data = np.concatenate([np.ma.getdata(array) for array in arrays])
        mask = np.concatenate([np.ma.getmaskarray(array) for array in arrays])
        return np.ma.MaskedArray(data, mask=mask)
    return np.concatenate(arrays)


def _last_by_key(parts: Sequence[dict[str, Array]], key: str) -> dict[str, Array]:
    """The rows of ``parts`` one after the other, each key's last row only."""
    if not parts:
        return {}
    names = list(parts[0])
    rows = {name: _concatenate([part[name] for part in parts]) for name in names}
    keys = rows[key]
    assert keys is not None
    keep = _last_positions(keys)
    return {name: values[keep] for name, values in rows.items() if values is not None}


def _last_positions(keys: Array) -> npt.NDArray[np.intp]:
    """Positions of each key's last occurrence, in the order of the rows."""
    seen: set[object] = set()
    last: list[int] = []
    for position in range(len(keys) - 1, -1, -1):
        value = keys[position]
        if value not in seen:
            seen.add(value)
            last.append(position)
    return np.asarray(last[::-1], dtype=np.intp)


def _keys_not_in(keys: Array | None, upserted: Array | None) -> Array | None:
    if keys is None:
        return None
    keys = np.unique(keys)  # two parts may both delete a key
    return keys if upserted is None else keys[~np.isin(keys, upserted)]
