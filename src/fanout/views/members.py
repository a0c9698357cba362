"""Which rows a view selects, given their columns: one answer for every place that holds rows
outside a relay's buffers (a batch's change set, a log entry being audited) and for the buffers.

* a region selects the rows whose coordinates (the dataset's index columns) lie inside it;
* a topic filter the rows whose topic (the index column) it matches, ``$share/group/`` ignored
  (a group member gets every matching message, as in mode ``latest``);
* any of several topic filters or object paths the rows any of them selects;
* an object path the objects in its scope (the index column holds the path) that pass one of its
  ``f=`` comparisons, if it has any; the comparisons read every other column.

SQL views are not here: their rows are a query's result over the relay's tables
(``relay.data.tables``), not a selection of one dataset's rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from fanout.views.anyof import AnyOf
from fanout.views.objects import ObjectPath
from fanout.views.region import Box, Intersection, RegionUnion, Sector, Sphere
from fanout.views.topic import TopicFilter

Selecting: TypeAlias = (
    Box | Sphere | Sector | RegionUnion | Intersection | TopicFilter | ObjectPath | AnyOf
)
"""The views that select rows of one dataset by their own columns."""

SELECTING = (Box, Sphere, Sector, RegionUnion, Intersection, TopicFilter, ObjectPath, AnyOf)

Columns = Mapping[str, npt.ArrayLike]


def members(view: Selecting, rows: Columns, index: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Which of ``rows`` (column -> values, aligned) ``view`` selects.

    Args:
        view: a region, topic filter or object path.
        rows: the rows' columns; every index column must be there, and for an object path with
            ``f=`` comparisons every column they name (names starting with ``_`` are ignored).
        index: the dataset's index columns (coordinates; the topic; the object path).

    Raises:
        KeyError: an index column is missing from ``rows``.
        TypeError: ``view`` is not a selecting view.
    """
    match view:
        case AnyOf():
            mask = members(view.views[0], rows, index)
            for member in view.views[1:]:
                mask = mask | members(member, rows, index)
            return mask
        case TopicFilter():
            return view.match(_strings(rows[index[0]]))
        case ObjectPath():
            return _objects(view, rows, index[0])
        case Box() | Sphere() | Sector() | RegionUnion() | Intersection():
            return np.asarray(view.match(*(rows[name] for name in index)), dtype=np.bool_)
    raise TypeError(f"{type(view).__name__} does not select rows by their columns")


def _objects(view: ObjectPath, rows: Columns, path: str) -> npt.NDArray[np.bool_]:
    paths = np.asarray(_strings(rows[path]), dtype=np.str_)
    mask = view.in_scope(paths)
    if not view.filters or not mask.any():
        return mask
    scope = np.flatnonzero(mask)
    names = [name for name in rows if name != path and not name.startswith("_")]
    values = [np.asarray(rows[name])[scope].tolist() for name in names]
    attrs = [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]
    mask[scope] = view.match(paths[scope], attrs)
    return mask


def _strings(values: npt.ArrayLike) -> list[str]:
    return [str(value) for value in np.asarray(values, dtype=object).tolist()]
