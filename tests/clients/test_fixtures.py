"""The TypeScript client's unit tests decode payloads that fanout.wire encoded
(clients/typescript/test/fixtures/): the committed files are what fanout.wire writes now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FIXTURES = Path(__file__).parents[2] / "clients" / "typescript" / "test"


def test_the_typescript_fixtures_are_what_fanout_wire_encodes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for written in module.write(tmp_path):
        committed = FIXTURES / "fixtures" / written.name
        assert written.read_text() == committed.read_text(), (
            f"{committed} is out of date: run"
            " PYTHONPATH=src python clients/typescript/test/make_fixtures.py"
        )
