"""Module docstrings say what and why in a few lines (STYLE.md item 19); the rest is in docs/."""

from __future__ import annotations

import ast
from pathlib import Path

import fanout

SRC = Path(fanout.__file__).parent

#: Lines a module docstring may take at most.
MOST = 15
#: Modules other helpers own for now (their docstrings are cut when they land): the reason each.
OWNED_ELSEWHERE: dict[str, str] = {}


def module_docstring_lines(path: Path) -> int:
    docstring = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    return len(docstring.splitlines()) if docstring else 0


def test_no_module_docstring_passes_fifteen_lines() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := module_docstring_lines(path)) > MOST
    }
    assert {name: n for name, n in long.items() if name not in OWNED_ELSEWHERE} == {}


def test_a_docstring_is_counted_by_its_lines(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""One.\n\nThree.\n"""\n\nX = 1\n')
    assert module_docstring_lines(module) == 3
    module.write_text("X = 1\n")
    assert module_docstring_lines(module) == 0
