"""Dataset kinds are plug-ins (views/registry.py): one registration per kind, looked up once,
and no module that serves every kind asks which kind it holds — so a new kind is its two sides
and one registration. View languages likewise: access rules, release and the cluster's map ask
a view's language for its part, naming no language's views."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fanout
from fanout.cluster.responsibility import MapPart, part_of
from fanout.errors import ProtocolError
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.relay.kinds import RelaySide
from fanout.relay.kinds.keyed import KeyedKind
from fanout.testing import exact
from fanout.testing.exact.relay import ExactSelector
from fanout.views import registry
from fanout.views.kinds import KIND_CLASSES
from fanout.views.text import parse
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import Acquire, Batch, Catalog, DatasetInfo, Push, Subscribe

SRC = Path(fanout.__file__).parent
BUILT_IN = ("space", "sql", "topic", "path", "objects")
#: Kind names that name no view language as well: naming one is asking which kind a dataset is.
KIND_ONLY = ("space", "objects")

#: The modules that drive every kind: they read no index and import no language's views.
KIND_BLIND = (
    "relay/core/relaycore.py",
    "relay/core/serving.py",
    "relay/core/every.py",
    "relay/core/lifecycle.py",
    "relay/core/stats.py",
    "tiers/below.py",
    "tiers/cut.py",
)
#: Every other place that once told kinds apart by their index: each finds a dataset's kind, or
#: its view language, in the registry (they may still work in one language's algebra: access
#: rules, release and the cluster's map are the algebra of views, not of datasets).
DISPATCHING = (
    "relay/kinds/__init__.py",
    "relay/core/rules.py",
    "relay/core/release.py",
    "relay/core/planner.py",
    "cluster/responsibility.py",
    "publisher/matching/__init__.py",
    "publisher/microbatch.py",
    "publisher/pipeline.py",
    "publisher/config/datasets.py",
    "publisher/sources/producerlog.py",
    "client/subscriber.py",
    "http/api.py",
    "mqtt/ingest.py",
    "mqtt/producer.py",
)

#: The modules that work in every view language's algebra: each asks the view's language
#: (``views.registry.Language``) and names no language's views.
LANGUAGE_BLIND = ("relay/core/rules.py", "relay/core/release.py", "cluster/responsibility.py")
#: The view classes of the built-in languages (``AnyOf``, of any language, is not one).
VIEW_CLASSES = {cls.__name__ for classes in KIND_CLASSES.values() for cls in classes} | {
    "AbsoluteRegion"
}


def _is_index(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "index"


def asks_which_kind(path: Path) -> Iterator[str]:
    """Where the module at ``path`` tells dataset kinds apart by name."""
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare) and any(
            _is_index(side) for side in (node.left, *node.comparators)
        ):
            yield f"{where} compares a dataset's index"
        if isinstance(node, ast.Match) and _is_index(node.subject):
            yield f"{where} matches a dataset's index"
        if isinstance(node, ast.Constant) and node.value in KIND_ONLY:
            yield f"{where} names a kind ({node.value!r})"
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant)}
            if len(keys & set(BUILT_IN)) > 1:
                yield f"{where} tables kinds by name"
        if isinstance(node, ast.Name) and node.id in ("KINDS", "VIEW_KIND", "VIEW_KINDS"):
            yield f"{where} reads a table of kinds ({node.id})"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and isinstance(node.args[1], ast.Name)
            and node.args[1].id.endswith(("Kind", "Matcher"))
        ):
            yield f"{where} asks which kind's class an object is ({node.args[1].id})"
        if isinstance(node, ast.ImportFrom) and node.module == "fanout.relay.kinds":
            named = {alias.name for alias in node.names} - {"Accepted", "Cut", "DatasetKind"}
            if named - {"Parts", "RelaySide", "make", "stat_names"}:
                yield f"{where} imports one kind's module"


@pytest.mark.parametrize("module", KIND_BLIND)
def test_the_core_never_asks_which_kind_a_dataset_is(module: str) -> None:
    path = SRC / module
    assert list(asks_which_kind(path)) == []
    languages = ("sql", "topic", "objects", "region", "entity")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            assert node.attr != "index", f"{module}:{node.lineno} reads a dataset's index kind"
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module not in {f"fanout.views.{name}" for name in languages}, (
                f"{module}:{node.lineno} imports the views of one kind ({node.module})"
            )
            assert node.module == "fanout.relay.kinds.base" or not node.module.startswith(
                "fanout.relay.kinds."
            ), f"{module}:{node.lineno} imports one kind ({node.module})"
        if isinstance(node, ast.Constant):
            assert node.value not in BUILT_IN, f"{module}:{node.lineno} names {node.value!r}"


@pytest.mark.parametrize("module", DISPATCHING)
def test_every_other_place_finds_a_kind_in_the_registry(module: str) -> None:
    assert list(asks_which_kind(SRC / module)) == []


@pytest.mark.parametrize("module", LANGUAGE_BLIND)
def test_the_algebra_of_every_language_never_asks_which_language_a_view_is(module: str) -> None:
    languages = {f"fanout.views.{name}" for name in ("sql", "topic", "objects", "region", "entity")}
    for node in ast.walk(ast.parse((SRC / module).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module not in languages, f"{module}:{node.lineno} imports {node.module}"
            assert not node.module.startswith(
                ("fanout.relay.core.languages", "fanout.cluster.parts")
            ), f"{module}:{node.lineno} imports one language's part ({node.module})"
            named = {alias.name for alias in node.names} & VIEW_CLASSES
            assert not named, f"{module}:{node.lineno} imports view classes {sorted(named)}"
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            assert name not in VIEW_CLASSES, f"{module}:{node.lineno} names {name}"


class _Everywhere(MapPart):
    def part(self, view: object, side: float) -> str | None:
        return "everywhere"


EVERYWHERE = _Everywhere()


def test_a_registered_language_answers_for_its_views() -> None:
    built_in = registry.languages()["path"]
    registry.register(registry.Language("path", map=f"{__name__}:EVERYWHERE"))
    try:
        assert part_of("d", parse("/pps/a/b", "path")) == "d/everywhere"
    finally:
        registry.register(built_in)
    assert part_of("d", parse("/pps/a/b", "path")) == "d/dir:/pps/a"


def test_the_check_sees_each_way_of_asking(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if info.index == "x": pass\nmatch d.index:\n    case _: pass\nk = "objects"\n'
        'T = {"sql": 1, "topic": 2}\nVIEW_KIND.get(i)\nisinstance(m, RegionMatcher)\n'
    )
    found = list(asks_which_kind(probe))
    assert sorted(line.split(" ", 1)[1] for line in found) == [
        "asks which kind's class an object is (RegionMatcher)",
        "compares a dataset's index",
        "matches a dataset's index",
        "names a kind ('objects')",
        "reads a table of kinds (VIEW_KIND)",
        "tables kinds by name",
    ]


def test_every_built_in_kind_is_registered_with_both_sides() -> None:
    kinds = registry.kinds()
    assert set(kinds) == set(BUILT_IN)
    for kind in kinds.values():
        assert isinstance(kind.part("relay"), RelaySide)
        assert callable(kind.part("publisher").matcher)
    assert {index: kind.language for index, kind in kinds.items()} == {
        "space": "region",
        "sql": "sql",
        "topic": "topic",
        "path": "path",
        "objects": "path",
    }


def test_an_unknown_kind_is_refused_naming_those_there_are() -> None:
    info = DatasetInfo("x", "id", {"id": "<i8"}, "graph", ["id"])
    core = RelayCore()
    with pytest.raises(
        ProtocolError, match="index 'graph', not one of objects, path, space, sql, topic"
    ):
        core.on_catalog(Catalog([info]))
    assert core.datasets == {}


@pytest.fixture
def registered() -> Iterator[registry.Kind]:
    registry.register(exact.KIND)
    yield exact.KIND
    registry.unregister(exact.KIND.index)


def test_a_new_kind_registered_is_served_by_the_unchanged_core(registered: registry.Kind) -> None:
    info = DatasetInfo("names", "topic", {"topic": "str", "v": "<f8"}, "exact", ["topic"])
    core = RelayCore()
    core.on_catalog(Catalog([info]))
    served = core.parts.kinds["names"]
    assert isinstance(served, KeyedKind) and isinstance(served.rows.selector, ExactSelector)
    sends = core.on_subscribe(1, Subscribe(1, "names", topic("a/b"), rate=1000.0))
    (acquire,) = [s.frame for s in sends if s.to == UPSTREAM]
    assert isinstance(acquire, Acquire) and acquire.view == topic("a/b")
    rows = {"topic": np.array(["a/b", "a/c"], dtype=object), "v": np.array([1.0, 2.0])}
    deletes = encode_columns({"topic": np.array([], dtype=object)})
    core.on_batch(
        Batch("names", 1, 0, 0, 0.0, encode_columns(rows), deletes, snapshots=[acquire.prim])
    )
    (push,) = [s.message() for s in core.pushes(1.0, lambda client: True)]
    assert isinstance(push, Push) and push.full
    assert decode_columns(push.entered)["topic"].tolist() == ["a/b"]


def test_a_registered_kind_takes_its_languages_views_everywhere(registered: registry.Kind) -> None:
    from fanout.relay.core.rules import restrict

    request = Subscribe(1, "names", topic("a/#"))
    served = restrict(request, {"names": ["a/b"]}, {"names": "exact"})
    assert served.view == topic("a/b")
    assert registry.language("exact") == "topic"


def test_a_kind_installed_with_an_entry_point_is_found_at_the_first_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(exact.entry_point_on_path(tmp_path)))
    monkeypatch.setattr(registry, "_ENTRY_POINTS", [])  # not looked for yet
    try:
        assert registry.lookup("exact") == exact.KIND
    finally:
        registry.unregister(exact.KIND.index)
    with pytest.raises(ProtocolError, match="index 'exact', not one of"):
        registry.lookup("exact")


def test_a_registered_kind_says_which_rows_its_primitives_hold(
    registered: registry.Kind,
) -> None:
    info = DatasetInfo("names", "topic", {"topic": "str", "v": "<f8"}, "exact", ["topic"])
    core = RelayCore()
    core.on_catalog(Catalog([info]))
    rows = {"topic": np.array(["a/b", "a/+"], dtype=object), "v": np.array([1.0, 2.0])}
    # the name "a/+" exactly, not the topic filter's matches
    assert core.parts.kinds["names"].holds([topic("a/+")], rows).tolist() == [False, True]
