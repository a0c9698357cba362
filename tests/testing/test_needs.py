"""A test needing a missing program skips naming its package, and fails on CI instead
(testing/needs.py): called, as a marker, and raised by a throwaway server, in a real pytest run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fanout.testing import needs
from fanout.testing.needs import need

ROOT = Path(__file__).parents[2]

#: Run by an inner pytest with an empty PATH: every way a test can need a program.
SUITE = """
import pytest

from fanout.testing.binaries import ProgramMissing
from fanout.testing.redis import throwaway_redis_cluster


@pytest.fixture(scope="module")
def cluster():
    with throwaway_redis_cluster() as nodes:
        yield nodes


@pytest.mark.needs("mosquitto_sub", "mosquitto_pub")
def test_marked():
    raise AssertionError("ran without mosquitto_sub")


def test_raised():
    raise ProgramMissing("promtool")


def test_fixture(cluster):
    raise AssertionError("ran without redis-server")


def test_fixture_again(cluster):  # the module's fixture failed once: its cached error again
    raise AssertionError("ran without redis-server")


def test_needing_nothing():
    pass
"""


def inner_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(SUITE)
    inherited = {key: value for key, value in os.environ.items() if key != "FANOUT_CI"}
    environment = inherited
    environment |= {"PATH": str(tmp_path / "no-programs"), "PYTHONPATH": str(ROOT / "src")}
    if ci is not None:
        environment["FANOUT_CI"] = ci
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "fanout.testing.needs"),
            *("-p", "no:cacheprovider", "-rA", "--strict-markers", "test_inner.py"),
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_program_skips_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FANOUT_CI", raising=False)
    monkeypatch.setattr(needs, "find", lambda _: None)
    with pytest.raises(pytest.skip.Exception, match=r"^needs nats-server \(Debian package nats-s"):
        need("nats-server")


def test_on_ci_a_missing_program_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANOUT_CI", "1")
    monkeypatch.setattr(needs, "find", lambda program: None if program == "initdb" else "/x")
    with pytest.raises(pytest.fail.Exception) as failed:
        need("pg_ctl", "initdb")
    assert str(failed.value) == (
        "needs initdb (Debian package postgresql): on CI (FANOUT_CI is set) every test must run"
    )


def test_programs_installed_let_the_test_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANOUT_CI", "1")
    monkeypatch.setattr(needs, "find", lambda program: f"/usr/bin/{program}")
    need("nats-server", "redis-server")


def test_in_a_run_each_way_of_needing_skips_with_the_package(tmp_path: Path) -> None:
    result = inner_pytest(tmp_path, ci=None)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "1 passed, 4 skipped" in out, out
    assert "needs mosquitto_sub (Debian package mosquitto-clients); needs mosquitto_pub" in out
    assert "needs promtool (Debian package prometheus)" in out
    assert re.search(r"SKIPPED \[2\] .*: needs redis-server \(Debian package redis-server\)", out)


def test_in_a_ci_run_each_way_of_needing_fails(tmp_path: Path) -> None:
    result = inner_pytest(tmp_path, ci="1")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "skipped" not in out, out
    assert "ran without" not in out  # failed before the test's body, never by running it
    # errors: in set-up (the marker, the module's fixture); failed: in the test's call
    assert re.search(r"= 1 failed, 1 passed, 3 errors in", out), out
    assert out.count("on CI (FANOUT_CI is set) every test must run") >= 4, out
