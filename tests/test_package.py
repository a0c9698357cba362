"""fanout as a distribution: its own name on the package index, its version, its type hints.

``fanout`` on the package index is another project, so fanout is installed as ``fanout-live``
and imported as ``fanout``. These tests run setuptools on this tree, as ``pip install`` and
``pip wheel`` do, without compiling the kernels (building a whole wheel takes a minute here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import fanout

ROOT = Path(__file__).parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _setuptools(*args: str) -> None:
    """Run setuptools on this tree (setup.py and pyproject.toml) in a fresh interpreter."""
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, timeout=120)


def test_the_distribution_is_named_fanout_live_everywhere() -> None:
    assert PROJECT["name"] == fanout.DISTRIBUTION == "fanout-live"
    demo = PROJECT["optional-dependencies"]["demo"]
    assert "fanout-live[publisher,relay]" in demo  # an extra naming the others: the new name
    readme = (ROOT / "README.md").read_text()
    assert "pip install fanout-live " in readme
    for document in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = document.read_text()
        assert "pip install fanout " not in text, document
        assert "'fanout[" not in text and "`fanout[" not in text, document


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    """With this tree's metadata on the path, as ``pip install`` leaves it, ``__version__`` is
    pyproject.toml's version."""
    _setuptools(
        "-c",
        "import sys; from setuptools import build_meta;"
        " build_meta.prepare_metadata_for_build_wheel(sys.argv[1])",
        str(tmp_path),
    )
    assert (tmp_path / f"fanout_live-{PROJECT['version']}.dist-info").is_dir()
    environment = os.environ | {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    printed = subprocess.run(
        [sys.executable, "-c", "import fanout; print(fanout.__version__)"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert printed.strip() == PROJECT["version"]


def test_version_of_a_source_tree_never_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert fanout._installed_version() == "0+unknown"


def test_the_package_ships_py_typed_and_the_viewer(tmp_path: Path) -> None:
    """PEP 561: the built package holds ``py.typed``, so users' type checkers read its hints;
    and the live viewer's files, the TypeScript client's bundle with them (no Node.js needed)."""
    assert (ROOT / "src" / "fanout" / "py.typed").is_file()
    _setuptools("setup.py", "-q", "build_py", "-d", str(tmp_path))
    assert (tmp_path / "fanout" / "py.typed").is_file()
    viewer = tmp_path / "fanout" / "http" / "viewer"
    shipped = {"index.html", "viewer.css", "viewer.js", "map.js", "viewtext.js", "fanout-client.js"}
    assert shipped <= {path.name for path in viewer.iterdir()}
