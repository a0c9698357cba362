"""Which objects and attributes an object path selects at the relay (relay/kinds/path.py)."""

from __future__ import annotations

from collections.abc import Callable

from fanout.relay.data.buffers import Table
from fanout.relay.kinds.path import path_columns, path_positions
from fanout.views.objects import parse as path
from fanout.wire.messages import DatasetInfo

OBJECTS = DatasetInfo(
    "objects", "path", {"path": "str", "state": "str", "rpm": "<i8"}, "path", ["path"]
)


def test_a_path_view_filters_objects_and_names_its_attributes(table: Callable[..., Table]) -> None:
    rows = table(
        OBJECTS,
        path=["/c/1", "/c/2", "/c/3", "/d/1"],
        state=["on", "off", "on", "on"],
        rpm=[900, 5000, 6000, 7000],
    )
    view = path("/c/.all?delta,f=state+rpm>4000")
    assert rows.keys[path_positions(view, rows, OBJECTS)].tolist() == ["/c/2", "/c/3"]
    # f= names the attributes sent (state) and the comparisons that filter (rpm>4000)
    assert path_columns(view, ["path", "state", "rpm"], "path") == ("path", "state")
    assert path_columns(path("/c/1"), ["path", "state", "rpm"], "path") == ("path", "state", "rpm")
