"""Objects datasets (index ``objects``): PPS objects as cells, views that are object paths
(US 9,026,567, QNX PPS; ``views.objects.store`` for the cells, docs/objects.md).

A row is one cell: an attribute of an object, or an object's or directory's marker. A view
``/dir/obj`` selects the cells of that object, ``/dir/.all`` those of every object and directory
directly in ``dir``. ``f=`` names keep the markers and the named attributes' cells; ``f=``
comparisons keep the objects for which one holds, judged on all of their attributes (each cell's
value read by its encoding). Upstream the view is acquired without options (the publisher's path
matching on the ``object`` column), so the relay holds whole objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.relay.core.transforms import resolve
from fanout.relay.data.buffers import Mask, Positions, Table
from fanout.relay.data.keyedstate import KeyedState
from fanout.relay.kinds.base import Accepted, Parts, RelaySide
from fanout.relay.kinds.objectlens import ObjectLens
from fanout.relay.kinds.path import OBJECT_PATHS, without_options
from fanout.relay.kinds.selected import PlainLanguage, selecting
from fanout.views import View
from fanout.views.anyof import members_of
from fanout.views.members import Selecting
from fanout.views.objects import ObjectPath, passes
from fanout.views.objects.store import DIRECTORY_MARK, OBJECT_MARK, touched
from fanout.wire.messages import Subscribe


def accept_cells(state: KeyedState, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
    """An object path; its rows are whole cells (``f=`` narrows which cells, not columns).

    Raises:
        InvalidView: ``f=`` comparisons in mode ``every`` (an object's filter reads several
            cells, a step sees one).
        InvalidTransform: the transform does not fit the dataset.
    """
    for view in members_of(request.view):  # any of several paths: a view under rules
        assert isinstance(view, ObjectPath)
        if request.mode == "every" and view.filters:
            raise InvalidView(
                f"{view.path!r}: f= comparisons on an objects dataset are served in mode"
                " 'latest' only"
            )
    shape = resolve(request.transform, state.info, capabilities)
    return Accepted(shape, state.info.key, list(shape.columns))


def object_cells(state: KeyedState) -> PlainLanguage:
    """The language of an ``objects`` dataset: object paths, as a path dataset acquires them."""
    return PlainLanguage(state, OBJECT_PATHS, without_options, accept_cells)


class CellSelector:
    """The cells of the objects a path selects (``selected.Selector``)."""

    def __init__(self, state: KeyedState, parts: Parts) -> None:
        self.state = state

    def positions(self, view: View) -> Positions:
        """The cells of the objects in the path's scope that pass its filters (any of several
        paths': the union of their cells)."""
        table = self.state.buffer.active
        paths = [path for path in members_of(view) if isinstance(path, ObjectPath)]
        found = [cell_positions(path, table) for path in paths]
        return found[0] if len(found) == 1 else np.unique(np.concatenate(found))

    def stats(self) -> dict[str, float]:
        """No counters."""
        return {}


def cell_positions(view: ObjectPath, table: Table) -> Positions:
    """Sorted positions of the cells ``view`` selects (the module's rules)."""
    return np.flatnonzero(cell_mask(view, table.columns))


def cells_selected(view: Selecting, columns: Mapping[str, Any], index: Sequence[str]) -> Mask:
    """Which of some cells (whole objects: column -> values) a path, or any of several,
    selects, each object judged on its cells among them (``lens.Selects``)."""
    mask = np.zeros(len(columns["object"]), dtype=bool)
    for path in members_of(view):
        mask |= cell_mask(cast(ObjectPath, path), columns)
    return mask


def cell_mask(view: ObjectPath, columns: Mapping[str, Any]) -> Mask:
    """Which of some cells (column -> values) ``view`` selects (the module's rules)."""
    objects = np.asarray(columns["object"], dtype=np.str_)
    if not len(objects):
        return np.zeros(0, dtype=bool)
    attrs = np.asarray(columns["attr"], dtype=np.str_)
    mask = view.in_scope(objects)
    if view.filters and mask.any():
        mask &= np.isin(objects, sorted(_passing(view, columns, mask)))
    if view.attributes is not None:
        mask &= np.isin(attrs, [*sorted(view.attributes), OBJECT_MARK, DIRECTORY_MARK])
    return np.asarray(mask, dtype=bool)


def _passing(view: ObjectPath, columns: Mapping[str, Any], mask: npt.NDArray[np.bool_]) -> set[str]:
    """The objects in scope for which one of the view's comparisons holds."""
    values: dict[str, dict[str, object]] = {}
    for at in np.flatnonzero(mask).tolist():
        attr = str(columns["attr"][at])
        cells = values.setdefault(str(columns["object"][at]), {})
        if attr not in (OBJECT_MARK, DIRECTORY_MARK):
            cells[attr] = typed(str(columns["encoding"][at]), str(columns["value"][at]))
    return {
        path for path, cells in values.items() if any(passes(flt, cells) for flt in view.filters)
    }


def typed(encoding: str, text: str) -> object:
    """A cell's value as ``f=`` compares it: numbers as numbers, booleans as booleans."""
    if encoding == "n":
        return int(text) if text.lstrip("-").isdigit() else float(text)
    if encoding == "b":
        return text == "true"
    return text


SIDE = RelaySide(
    selecting(object_cells, CellSelector, lenses=ObjectLens.maker(cells_selected), reach=touched)
)
"""Index ``objects`` at the relay."""
