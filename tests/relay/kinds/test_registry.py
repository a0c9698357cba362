"""Dataset kinds are plug-ins (relay/kinds/__init__.py): chosen once from the catalog, and the
core never asks which kind it holds — so a new kind is one class and its registration."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import fanout
from fanout.errors import ProtocolError
from fanout.relay import kinds
from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.relay.data.buffers import Positions
from fanout.relay.kinds.keyed import SelectingKind
from fanout.views import View
from fanout.views.topic import TopicFilter
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import Acquire, Batch, Catalog, DatasetInfo, Push, Subscribe

#: The modules that drive every kind and must not tell kinds apart.
KIND_BLIND = (
    "relay/core/relaycore.py",
    "relay/core/serving.py",
    "relay/core/every.py",
    "relay/core/lifecycle.py",
    "tiers/below.py",
    "tiers/cut.py",
)


@pytest.mark.parametrize("module", KIND_BLIND)
def test_the_core_never_asks_which_kind_a_dataset_is(module: str) -> None:
    source = Path(fanout.__file__).parent / module
    tree = ast.parse(source.read_text())
    kind_modules = ("fanout.views.sql", "fanout.views.topic", "fanout.views.objects")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert node.attr != "index", f"{module}:{node.lineno} reads a dataset's index kind"
        if isinstance(node, ast.ImportFrom):
            assert node.module not in (*kind_modules, "fanout.views.region"), (
                f"{module}:{node.lineno} imports the views of one kind ({node.module})"
            )
        if isinstance(node, ast.Constant):
            assert node.value not in ("space", "sql", "topic", "path", "objects"), (
                f"{module}:{node.lineno} names a kind ({node.value!r})"
            )


def test_every_catalog_index_has_a_kind_and_an_unknown_one_is_refused() -> None:
    assert set(kinds.KINDS) == {"space", "sql", "topic", "path", "objects"}
    info = DatasetInfo("x", "id", {"id": "<i8"}, "graph", ["id"])  # type: ignore[arg-type]
    core = RelayCore()
    with pytest.raises(
        ProtocolError, match="index 'graph', not one of objects, path, space, sql, topic"
    ):
        core.on_catalog(Catalog([info]))
    assert core.datasets == {}


class ExactTopics(SelectingKind):
    """A kind for the test: topic names that select only the rows of exactly that topic."""

    language = (TopicFilter, "topic names")

    def positions(self, view: View) -> Positions:
        assert isinstance(view, TopicFilter)
        topics = self.state.buffer.active.column(self.state.info.index_columns[0])
        return np.flatnonzero(np.asarray(topics, dtype=object) == view.topic_filter)


def test_a_new_kind_registered_is_served_by_the_unchanged_core(monkeypatch) -> None:
    monkeypatch.setitem(kinds.KINDS, "exact", ExactTopics)
    info = DatasetInfo("names", "topic", {"topic": "str", "v": "<f8"}, "exact", ["topic"])  # type: ignore[arg-type]
    core = RelayCore()
    core.on_catalog(Catalog([info]))
    assert isinstance(core.parts.kinds["names"], ExactTopics)
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
