"""Batches as tests write them: a publisher's micro-batch for one dataset, from plain lists.

``batch(3, rows(k1=(1, 1), k2=(5, 5)), deletes=[4])`` is seq 3 of ``agents`` upserting keys 1
and 2 at those points and deleting key 4; ``batch(3)`` is the empty batch a publisher sends a
relay for a micro-batch that changed nothing it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from fanout.wire.columns import encode_columns
from fanout.wire.messages import Batch


def batch(
    seq: int,
    upserts: Mapping[str, npt.ArrayLike] | None = None,
    deletes: Sequence[int] | npt.NDArray[np.int64] = (),
    *,
    dataset: str = "agents",
    key: str = "id",
    epoch: int = 1,
    tick: int | None = None,
    tick_time: float = 0.0,
    snapshots: Iterable[int] = (),
) -> Batch:
    """Seq ``seq`` of ``dataset``: ``upserts`` (column -> values), ``deletes`` (keys).

    Args:
        seq: the batch's sequence number in its epoch.
        upserts: the rows written, column name -> equally long values; none when omitted.
        deletes: the integer keys deleted, sent in column ``key``.
        dataset: the dataset the batch belongs to.
        key: the dataset's key column, which carries ``deletes``.
        epoch: the publisher's epoch.
        tick: the simulation tick the batch is cut from (``seq`` when omitted).
        tick_time: when that tick happened.
        snapshots: the primitives whose whole content the batch carries.
    """
    return Batch(
        dataset=dataset,
        epoch=epoch,
        seq=seq,
        tick=seq if tick is None else tick,
        tick_time=tick_time,
        upserts=encode_columns(upserts or {}),
        deletes=encode_columns({key: np.asarray(deletes, dtype=np.int64)}),
        snapshots=list(snapshots),
    )


def rows(**points: tuple[float, float]) -> dict[str, list[int] | list[float]]:
    """Rows of ``agents`` from keyword points: ``rows(k1=(1, 2))`` is key 1 at x=1, y=2 (the
    name's digits after its first letter are the key)."""
    return {
        "id": [int(name[1:]) for name in points],
        "x": [float(point[0]) for point in points.values()],
        "y": [float(point[1]) for point in points.values()],
    }
