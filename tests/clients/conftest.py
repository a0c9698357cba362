"""The integration tests' module-wide process scope and directory, shared with tests/integration,
and the TypeScript client's packages installed (``npm ci``) and built (``npm run build``)."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.conftest import children, tmp_path

from fanout.testing.binaries import find, on_ci
from fanout.testing.needs import need

__all__ = ["children", "node_modules", "package", "tmp_path"]

PACKAGE = Path(__file__).parents[2] / "clients" / "typescript"


@contextlib.contextmanager
def _alone() -> Iterator[None]:
    """Hold the package's folder alone while npm writes in it: test modules run by other
    pytest workers (``-n``) wait here rather than install or build into it at once."""
    with open(Path(tempfile.gettempdir()) / "fanout-clients-typescript.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _older(made: Path, sources: list[Path]) -> bool:
    """Whether ``made`` is missing or older than one of ``sources``."""
    return not made.is_file() or max(p.stat().st_mtime for p in sources) > made.stat().st_mtime


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """The package's folder with its locked packages installed (``npm ci`` when not done or
    older than the lock); fails on CI, else skips, without ``node`` 20+ and ``npm``."""
    need("node", "npm")
    node, npm = find("node"), find("npm")
    assert node is not None and npm is not None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    if int(version.stdout.strip().lstrip("v").split(".")[0]) < 20:
        too_old = f"the TypeScript client's tests need node 20 or later, this is {version.stdout}"
        pytest.fail(too_old) if on_ci() else pytest.skip(too_old)
    lock = PACKAGE / "package-lock.json"
    with _alone():
        if _older(PACKAGE / "node_modules" / ".package-lock.json", [lock]):
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, check=True)
    return PACKAGE


@pytest.fixture(scope="module")
def package(node_modules: Path) -> Iterator[Path]:
    """The built package (``npm run build`` when not done or out of date)."""
    sources = [*node_modules.glob("src/*.ts"), node_modules / "package-lock.json"]
    with _alone():
        if _older(node_modules / "dist" / "index.js", sources):
            npm = find("npm")
            assert npm is not None
            subprocess.run([npm, "run", "build"], cwd=node_modules, check=True)
    yield node_modules
