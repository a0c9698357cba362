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
from fanout.relay.kinds.base import Accepted, RelaySide
from fanout.relay.kinds.keyed import SelectingKind
from fanout.views import View
from fanout.views.anyof import AnyOf, members_of
from fanout.views.members import members
from fanout.views.objects import ObjectPath
from fanout.wire.messages import DatasetInfo, Subscribe


class PathKind(SelectingKind):
    """A ``path`` dataset at the relay (``relay.kinds.base.DatasetKind``)."""

    language = (ObjectPath, "object paths")

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """An object path (or any of several); its rows carry the key and the attributes it
        names (all if none; any of several: those any of them names)."""
        self._check_language(request.view, request.transform, capabilities)
        info = self.state.info
        shape = resolve(request.transform, info, capabilities)
        view = request.view
        paths = [path for path in members_of(view) if isinstance(path, ObjectPath)]
        if all(path.attributes is not None for path in paths):
            names = {name for path in paths for name in path_columns(path, shape.columns, info.key)}
            columns = tuple(name for name in shape.columns if name in names)
            shape = msgspec.structs.replace(shape, columns=columns, identity=False)
        return Accepted(shape, info.key, list(shape.columns))

    def widened(self, piece: View) -> View:
        """The path without options."""
        assert isinstance(piece, ObjectPath)
        return ObjectPath(piece.object_path)

    def positions(self, view: View) -> Positions:
        """The objects in the path's scope that pass its filters (any of several paths')."""
        assert isinstance(view, ObjectPath | AnyOf)
        return path_positions(view, self.state.buffer.active, self.state.info)


def path_positions(view: ObjectPath | AnyOf, table: Table, info: DatasetInfo) -> Positions:
    """Sorted positions of the objects ``view`` selects: in its scope, passing a filter if any."""
    return np.flatnonzero(members(view, table.columns, info.index_columns))


def path_columns(view: ObjectPath, columns: Sequence[str], key: str) -> tuple[str, ...]:
    """The columns a path view sends: the key and the attributes ``f=`` names (all if none)."""
    if view.attributes is None:
        return tuple(columns)
    return tuple(name for name in columns if name == key or name in view.attributes)


SIDE = RelaySide(PathKind)
"""Index ``path`` at the relay."""
