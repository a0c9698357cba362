"""Object datasets (index ``path``): objects by path, views that are object paths.

A view selects the objects in its scope that pass its ``f=`` comparisons, if any
(``views.members``), and sends the attributes ``f=`` names. It is acquired upstream without
options: the publisher holds whole objects upstream.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from fanout.relay.core.transforms import resolve
from fanout.relay.data.buffers import Positions, Table
from fanout.relay.data.keyedstate import KeyedState
from fanout.relay.kinds.base import Accepted, Parts, RelaySide
from fanout.relay.kinds.selected import PlainLanguage, Views, selecting
from fanout.views import View
from fanout.views.anyof import AnyOf, members_of
from fanout.views.members import members
from fanout.views.objects import ObjectPath
from fanout.wire.messages import DatasetInfo, Subscribe


def accept_path(state: KeyedState, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
    """An object path (or any of several); its rows carry the key and the attributes it names
    (all if none; any of several: those any of them names)."""
    info = state.info
    shape = resolve(request.transform, info, capabilities)
    paths = [path for path in members_of(request.view) if isinstance(path, ObjectPath)]
    if all(path.attributes is not None for path in paths):
        names = {name for path in paths for name in path_columns(path, shape.columns, info.key)}
        columns = tuple(name for name in shape.columns if name in names)
        shape = msgspec.structs.replace(shape, columns=columns, identity=False)
    return Accepted(shape, info.key, list(shape.columns))


def without_options(piece: View) -> View:
    """A path as acquired upstream: without options (the publisher holds whole objects)."""
    assert isinstance(piece, ObjectPath)
    return ObjectPath(piece.object_path)


#: The views of path and objects datasets.
OBJECT_PATHS = Views(ObjectPath, "object paths")


def object_paths(state: KeyedState) -> PlainLanguage:
    """The language of a ``path`` dataset."""
    return PlainLanguage(state, OBJECT_PATHS, without_options, accept_path)


class PathSelector:
    """The objects in a path's scope that pass its filters (``selected.Selector``)."""

    def __init__(self, state: KeyedState, parts: Parts) -> None:
        self.state = state

    def positions(self, view: View) -> Positions:
        """The objects the path (any of several paths) selects."""
        assert isinstance(view, ObjectPath | AnyOf)
        return path_positions(view, self.state.buffer.active, self.state.info)

    def stats(self) -> dict[str, float]:
        """No counters."""
        return {}


def path_positions(view: ObjectPath | AnyOf, table: Table, info: DatasetInfo) -> Positions:
    """Sorted positions of the objects ``view`` selects: in its scope, passing a filter if any."""
    return np.flatnonzero(members(view, table.columns, info.index_columns))


def path_columns(view: ObjectPath, columns: Sequence[str], key: str) -> tuple[str, ...]:
    """The columns a path view sends: the key and the attributes ``f=`` names (all if none)."""
    if view.attributes is None:
        return tuple(columns)
    return tuple(name for name in columns if name == key or name in view.attributes)


SIDE = RelaySide(selecting(object_paths, PathSelector, selects=members))
"""Index ``path`` at the relay."""
