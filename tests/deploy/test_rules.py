"""The alert rules (``deploy/prometheus/fanout.rules.yml``) as Prometheus reads them: checked by
``promtool check rules`` and unit-tested by ``promtool test rules`` on the series of
``fanout.rules.test.yml`` (which alerts fire when, and which stay quiet)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROMETHEUS = Path(__file__).parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "fanout.rules.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool in the rules' folder (the test file names the rules relative to it)."""
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip(
            "promtool is not installed (Debian's prometheus package: apt-get install prometheus)"
        )
    return subprocess.run(
        [binary, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    result = promtool("test", "rules", "fanout.rules.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
