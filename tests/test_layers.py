"""The packages' layers (docs/architecture.md): who may import whom, read from the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fanout

SRC = Path(fanout.__file__).parent

#: What both servers, the relay and the publisher, may import.
SERVERS = {"errors", "connection", "metrics", "views", "wire", "auth", "expiry", "tls", "buckets"}
#: package -> the other fanout packages and modules it may import.
ALLOWED: dict[str, set[str]] = {
    "views": {"errors"},
    "wire": {"errors", "views"},
    "client": {"errors", "connection", "views", "wire", "tls"},
    "relay": SERVERS,
    "publisher": SERVERS,
    "cache": {"errors", "wire"},
}
#: Subpackages allowed more than their package: the MQTT gateway follows its own relay's port
#: in mode ``every`` through the client library, as a bridge beside the relay would (sessions
#: replayed from the log, other producers' messages).
EXTRA: dict[str, set[str]] = {"relay/mqtt": {"client"}}


def imported(path: Path) -> set[str]:
    """The top-level fanout packages or modules a source file imports (at any depth)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "fanout" and node.level == 0:
            names = [f"fanout.{alias.name}" for alias in node.names]  # from fanout import tls
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found |= {name.split(".")[1] for name in names if name.startswith("fanout.")}
    return found


def extra(path: Path) -> set[str]:
    """What a file's subpackage may import beyond its package (``EXTRA``)."""
    return set().union(*(names for sub, names in EXTRA.items() if path.is_relative_to(sub)))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = {
        str(path.relative_to(SRC)): sorted(
            imported(path) - ALLOWED[package] - {package} - extra(path.relative_to(SRC))
        )
        for path in sorted((SRC / package).rglob("*.py"))
    }
    assert {path: names for path, names in wrong.items() if names} == {}


def test_both_forms_of_import_are_read(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text(
        "import fanout.wire.codec\nfrom fanout import tls, errors\nfrom fanout.views import Box\n"
    )
    assert imported(path) == {"wire", "tls", "errors", "views"}
