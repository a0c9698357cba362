"""Matching a micro-batch's changed rows against region primitives in the driver, with numpy.

The changed rows come to the driver anyway (the log, the batches). Spark's broadcast join
(``regions.match``) is planned afresh every micro-batch, which cost a micro-batch of 1,000-20,000
rows 0.8-1.2 s beyond collecting them on a loaded 2-core machine (``bench/microbatch.py``, 20
primitives); matching the collected rows here costs milliseconds. Its cost grows with the
primitives (one binary search and one ``match`` over the candidates each), which was not
measured with thousands of them. Spark's join stays for the state store's
reads (snapshots, point-in-time reads), where the rows are not in the driver.

Each primitive's candidates are the rows whose first index coordinate lies within its bounding
box (one binary search in the rows sorted on that axis), refined by the view's own ``match`` —
the same formulas Spark's refine uses (``regions.inside``). Entity primitives take the row of
their key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fanout.publisher.matching.base import Prim
from fanout.views.entity import Entity
from fanout.views.region import Box, RegionUnion, Sector, Sphere

Region = Box | Sphere | Sector | RegionUnion
#: A bounding box's interval is widened by this fraction of its coordinates' magnitude before
#: it selects candidates: a point a view's ``match`` accepts may lie a rounding error outside it.
SLACK = 1e-9


@dataclass(frozen=True)
class LocalTables:
    """Region and entity primitives prepared for matching in the driver (one per change of the
    registry): ``regions`` with each one's candidate interval on the first index axis, and
    ``entities`` as parallel lists of key, relay and primitive."""

    regions: tuple[tuple[int, int, Region, float, float], ...]
    entity_keys: tuple[int | str, ...]
    entity_prims: tuple[tuple[int, int], ...]

    def unpersist(self) -> None:
        """Nothing to release: the tables live in the driver's memory."""


def local_tables(prims: Iterable[Prim]) -> LocalTables | None:
    """Prepare ``(relay, prim, view)`` primitives (regions or entities); None when there are none.

    Raises:
        TypeError: a primitive is neither a region nor an entity (the matcher's ``check``
            admits no other).
    """
    regions: list[tuple[int, int, Region, float, float]] = []
    keys: list[int | str] = []
    owners: list[tuple[int, int]] = []
    for relay, prim, view in prims:
        if isinstance(view, Entity):
            keys.append(view.key)
            owners.append((relay, prim))
        elif isinstance(view, Box | Sphere | Sector | RegionUnion):
            bounds = view.bounds()
            low, high = _widened(bounds.lo[0], bounds.hi[0])
            regions.append((relay, prim, view, low, high))
        else:
            raise TypeError(f"not a region or entity primitive: {type(view).__name__}")
    if not regions and not keys:
        return None
    return LocalTables(tuple(regions), tuple(keys), tuple(owners))


def _widened(low: float, high: float) -> tuple[float, float]:
    if not (np.isfinite(low) and np.isfinite(high)):
        return -np.inf, np.inf
    margin = SLACK * max(abs(low), abs(high))
    return low - margin, high + margin


def match_local(
    rows: pa.Table, tables: LocalTables, index_columns: Sequence[str], key: str | None
) -> dict[int, npt.NDArray[np.int64]]:
    """Relay -> the sorted, distinct indices of ``rows`` inside any of its primitives.

    Args:
        rows: the changed rows, with the index columns (and the key column for entities).
        tables: the primitives (``local_tables``).
        index_columns: ``x, y[, z]``.
        key: the key column (entity primitives need it).

    Returns:
        Only relays with at least one row.
    """
    found: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    if rows.num_rows == 0:
        return {}
    if tables.regions:
        coords = [
            rows.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
            for name in index_columns
        ]
        # NaN sorts last and falls in no interval; no view matches it either.
        order = np.argsort(coords[0], kind="stable")
        first = coords[0][order]
        for relay, _, view, low, high in tables.regions:
            start = int(np.searchsorted(first, low, side="left"))
            stop = int(np.searchsorted(first, high, side="right"))
            if stop <= start:
                continue
            candidates = order[start:stop]
            inside = view.match(*(axis[candidates] for axis in coords))
            if inside.any():
                found[relay].append(candidates[inside])
    if tables.entity_keys and key is not None:
        where = pc.index_in(rows.column(key), value_set=pa.array(tables.entity_keys))
        hit = pc.is_valid(where).to_numpy(zero_copy_only=False)
        row_of = np.flatnonzero(hit)
        entity_of = where.filter(pc.is_valid(where)).to_numpy(zero_copy_only=False)
        # A key held by several primitives: ``index_in`` names the first; the rest are found
        # by their key.
        for position, (relay, _) in enumerate(tables.entity_prims):
            same = tables.entity_keys.index(tables.entity_keys[position])
            found[relay].append(row_of[entity_of == same].astype(np.int64))
    matched = {relay: np.unique(np.concatenate(parts)) for relay, parts in found.items()}
    return {relay: indices for relay, indices in matched.items() if len(indices)}
