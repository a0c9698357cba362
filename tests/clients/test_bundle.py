"""The client bundled for browsers (``src/fanout/http/viewer/fanout-client.js``, committed so
that ``pip install`` users need no Node.js) is what ``clients/typescript/bundle.mjs`` makes of
the sources now: esbuild, pinned in the package's lock, writes the same bytes on any machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fanout.testing.binaries import find

#: The committed bundle, read when the module is collected: before any test's ``npm run build``
#: could write it again.
BUNDLE = Path(__file__).parents[2] / "src" / "fanout" / "http" / "viewer" / "fanout-client.js"
COMMITTED = BUNDLE.read_text(encoding="utf-8") if BUNDLE.is_file() else ""


def test_the_committed_bundle_is_what_the_sources_make(node_modules: Path) -> None:
    node = find("node")
    assert node is not None
    made = subprocess.run(
        [node, "bundle.mjs", "--stdout"],
        cwd=node_modules,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=True,
    ).stdout
    if made != COMMITTED:
        pytest.fail(
            f"{BUNDLE} is not what clients/typescript/src makes now:"
            " run `npm run build` in clients/typescript and commit it"
        )
