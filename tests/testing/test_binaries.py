"""Finding the programs tests start (testing/binaries.py), and naming the package of one missing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from fanout.testing import binaries
from fanout.testing.binaries import ProgramMissing, find, on_ci, require


def executable(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_program_is_found_on_path_under_any_of_its_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find("promtool") is None
    assert find("chromium") is None
    promtool = executable(tmp_path, "promtool")
    browser = executable(tmp_path, "chromium-browser")  # Chromium's name outside Debian
    assert find("promtool") == str(promtool)
    assert find("chromium") == str(browser)


def test_a_program_off_path_is_found_where_debian_puts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(binaries.ELSEWHERE, "initdb", (str(tmp_path / "*" / "bin" / "initdb"),))
    assert find("initdb") is None
    (tmp_path / "16" / "bin").mkdir(parents=True)
    initdb = executable(tmp_path / "16" / "bin", "initdb")
    assert find("initdb") == str(initdb)


def test_a_missing_program_names_its_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ProgramMissing, match=r"^needs redis-cli \(Debian package redis-tools\)$"):
        require("redis-cli")
    missing = ProgramMissing("mosquitto_sub")
    assert (missing.program, missing.package) == ("mosquitto_sub", "mosquitto-clients")


def test_only_programs_with_a_known_package_are_looked_for() -> None:
    """A program must be listed with its package, so that the README's lines can bring it."""
    with pytest.raises(KeyError, match="'nc' is not one of"):
        find("nc")


@pytest.mark.parametrize(
    ("value", "ci"), [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)]
)
def test_ci_is_told_by_fanout_ci(
    value: str | None, ci: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("FANOUT_CI", raising=False)
    else:
        monkeypatch.setenv("FANOUT_CI", value)
    assert on_ci() is ci
