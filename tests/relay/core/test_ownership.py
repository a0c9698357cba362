"""A subscription's state has one owner (relay/core/lifecycle.py, its rule 8), read from the
source: no other module of fanout writes a field of a ``Subscription`` or of its ``every``
cursor, nor adds or drops one in the downstream store; they ask the lifecycle to move it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import fanout
from fanout.relay.core.changesets import Cursor
from fanout.relay.core.downstream import Subscription

SRC = Path(fanout.__file__).parent
OWNER = "relay/core/lifecycle.py"
#: Packages that never hold the relay's subscriptions: the subscriber library keeps its own
#: record of what it asked (``client/viewstate.py``), owned by ``client/core.py``.
ELSEWHERE = ("client/", "cache/", "publisher/", "views/", "wire/")
#: Everything a subscription holds, and what was asked, read through its properties.
FIELDS = set(Subscription.__slots__) | {
    name for name, value in vars(Subscription).items() if isinstance(value, property)
}
CURSOR_FIELDS = {field.name for field in dataclasses.fields(Cursor)}
#: Writes to attributes of the same names on other things, each with what it is.
NOT_SUBSCRIPTIONS = {
    ("demo.py", "watcher.view"),  # the demo's watcher, a subscriber
    ("cli/main.py", "args.rate"),  # the command line's arguments
    ("relay/core/every.py", "self._counters.pushes"),  # the relay's counters
    ("relay/core/serving.py", "self._counters.pushes"),
    ("relay/core/scheduler.py", "slot.priority"),  # a scheduler slot
    ("relay/core/scheduler.py", "slot.rate"),
    ("testing/audit.py", "report.held"),  # a subscriber's audit
    ("relay/kinds/sqllens.py", "last.rows"),  # the SQL lenses' memo of one write
    ("relay/data/buffers.py", "table.key"),  # a table restored from shared memory
    ("relay/data/spatial.py", "grid.rows"),  # a grid restored from shared memory
}


def written(tree: ast.AST) -> list[ast.Attribute]:
    """The attributes a module assigns, augments or deletes (tuple targets unpacked)."""
    targets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets += node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets.append(node.target)
        elif isinstance(node, ast.Delete):
            targets += node.targets
    found = []
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Tuple | ast.List):
            targets += target.elts
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, ast.Attribute):
            found.append(target)
    return found


def is_cursor(node: ast.expr) -> bool:
    """Whether ``node`` names an ``every`` cursor (``cursor``, ``x.cursor``)."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name == "cursor"


def writes_of_subscriptions(source: str, path: str) -> list[str]:
    """The writes in ``source`` that change a subscription's state."""
    wrong = []
    for target in written(ast.parse(source)):
        text = ast.unparse(target)
        if isinstance(target.value, ast.Name) and target.value.id == "self":
            continue  # an object's own attributes
        subscription = target.attr in FIELDS and (path, text) not in NOT_SUBSCRIPTIONS
        cursor = target.attr == "trusted_after" or (
            target.attr in CURSOR_FIELDS and is_cursor(target.value)
        )
        if subscription or cursor:
            wrong.append(text)
    return wrong


def test_only_the_lifecycle_writes_a_subscriptions_state() -> None:
    wrong = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel.startswith(ELSEWHERE):
            continue
        if rel != OWNER and (found := writes_of_subscriptions(path.read_text(), rel)):
            wrong[rel] = found
    assert wrong == {}


def indexing(source: str) -> list[str]:
    """The calls in ``source`` that add or drop a subscription in a downstream store."""
    return [
        ast.unparse(node.func)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("put", "remove")
        and ast.unparse(node.func.value).split(".")[-1] in ("downstream", "_downstream")
    ]


def test_only_the_lifecycle_adds_and_drops_subscriptions() -> None:
    found = {
        rel: calls
        for path in sorted(SRC.rglob("*.py"))
        if (rel := str(path.relative_to(SRC))) != OWNER and (calls := indexing(path.read_text()))
    }
    assert found == {}
    assert indexing("self.core.downstream.put(s)\nparts._downstream.remove(k)\nx.remove(k)") == [
        "self.core.downstream.put",
        "parts._downstream.remove",
    ]


def test_the_owner_writes_it() -> None:
    found = writes_of_subscriptions((SRC / OWNER).read_text(), OWNER)
    assert {text.split(".")[-1] for text in found} >= {"phase", "asked", "held", "pushes"}


def test_every_form_of_write_is_read() -> None:
    source = (
        "subscription.held = None\n"
        "a, (s.pushes, b) = 1, (2, 3)\n"
        "s.coalesced += 1\n"
        "x.y.phase: int = 1\n"
        "del s.owed\n"
        "subscription.cursor.trusted_after = None\n"
        "cursor.seq, cursor.keys = 1, []\n"
        "self.held = None\n"
        "state.seq = -1\n"
    )
    assert sorted(writes_of_subscriptions(source, "probe.py")) == sorted(
        [
            "subscription.held",
            "s.pushes",
            "s.coalesced",
            "x.y.phase",
            "s.owed",
            "subscription.cursor.trusted_after",
            "cursor.seq",
            "cursor.keys",
        ]
    )
