"""The TypeScript client's own unit tests (``npm test``: the core, the columnar decoding and the
shell, ``node --test``), run by ``make test``. They start ``node`` but no Spark publisher, so
they run beside the publishers' lane (tests/conftest.py), and early: the package they install
and build (``npm ci``, ``npm run build``: tests/clients/conftest.py) is then ready before
test_typescript.py, in that lane, needs it.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from fanout.testing.binaries import find

pytestmark = [pytest.mark.integration, pytest.mark.no_spark_publisher]


async def test_the_packages_unit_tests_pass(package: Path) -> None:
    """``npm test``: every test of the package passes."""
    npm = find("npm")
    assert npm is not None
    run = await asyncio.to_thread(
        subprocess.run, [npm, "test"], cwd=package, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout
