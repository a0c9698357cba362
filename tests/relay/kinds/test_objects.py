"""Which cells an object path selects at the relay (relay/kinds/objects.py): scope, f= names, and
f= comparisons judged per object on all of its attributes."""

from __future__ import annotations

from collections.abc import Callable

from fanout.relay.data.buffers import Table
from fanout.relay.kinds.objects import cell_positions, typed
from fanout.views.objects import parse as path
from fanout.views.objects.store import SCHEMA, ObjectStore
from fanout.views.objects.text import SetAttribute, Value
from fanout.wire.messages import DatasetInfo

WIRE = {"string": "str", "int": "<i4", "boolean": "|b1"}
PPS = DatasetInfo("pps", "cell", {c: WIRE[t] for c, t in SCHEMA.items()}, "objects", ["object"])


def cells(table: Callable[..., Table]) -> Table:
    store = ObjectStore()
    store.write(
        "/c/1", [SetAttribute("rpm", Value("n", "900")), SetAttribute("state", Value("", "on"))]
    )
    store.write(
        "/c/2", [SetAttribute("rpm", Value("n", "5000")), SetAttribute("state", Value("", "off"))]
    )
    store.write("/c/3", [SetAttribute("state", Value("", "on"))])
    store.make_directory("/c/sub")
    store.write("/d/1", [SetAttribute("rpm", Value("n", "9000"))])
    rows = [cell.row() for cell in store]
    return table(PPS, **{column: [row[column] for row in rows] for column in SCHEMA})


def selected(table: Table, text: str) -> list[str]:
    return sorted(table.keys[cell_positions(path(text), table)].tolist())


def test_a_directory_selects_its_objects_and_directories_cells(table: Callable[..., Table]) -> None:
    rows = cells(table)
    assert selected(rows, "/c/.all") == [
        "/c/1?", "/c/1?rpm", "/c/1?state", "/c/2?", "/c/2?rpm", "/c/2?state", "/c/3?",
        "/c/3?state", "/c/sub?/",
    ]  # fmt: skip
    assert selected(rows, "/c/2") == ["/c/2?", "/c/2?rpm", "/c/2?state"]
    assert selected(rows, "/.all") == ["/c?/", "/d?/"]


def test_f_comparisons_keep_whole_objects_and_f_names_keep_cells(
    table: Callable[..., Table],
) -> None:
    rows = cells(table)
    # rpm>4000 holds for /c/2 only; its state cell comes with it
    assert selected(rows, "/c/.all?f=rpm>4000") == ["/c/2?", "/c/2?rpm", "/c/2?state"]
    assert selected(rows, "/c/.all?f=state=on+rpm>4000") == [
        "/c/1?", "/c/1?rpm", "/c/1?state", "/c/2?", "/c/2?rpm", "/c/2?state", "/c/3?", "/c/3?state",
    ]  # fmt: skip
    assert selected(rows, "/c/.all?f=state") == [
        "/c/1?", "/c/1?state", "/c/2?", "/c/2?state", "/c/3?", "/c/3?state", "/c/sub?/",
    ]  # fmt: skip


def test_values_compare_by_their_encoding() -> None:
    assert typed("n", "42") == 42
    assert typed("n", "-1.5") == -1.5
    assert typed("b", "true") is True
    assert typed("", "42") == "42"
