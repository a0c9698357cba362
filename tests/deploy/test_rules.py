"""The alert rules (``deploy/prometheus/fanout.rules.yml``) as Prometheus reads them: checked by
``promtool check rules`` and unit-tested by ``promtool test rules`` on the series of
``fanout.rules.test.yml`` (which alerts fire when, and which stay quiet)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fanout.testing.binaries import find
from fanout.testing.needs import need

PROMETHEUS = Path(__file__).parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "fanout.rules.yml"
TESTS = PROMETHEUS / "fanout.rules.test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run promtool in the rules' folder (the test file names the rules relative to it)."""
    need("promtool")
    binary = find("promtool")
    assert binary is not None
    return subprocess.run(
        [binary, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_the_rules_fire_as_their_unit_tests_say() -> None:
    result = promtool("test", "rules", TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_example_configuration_loads_the_rules() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_every_alert_has_a_unit_test() -> None:
    """Each alert the rules declare is named by an ``alertname`` of the tests."""
    alerts = re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.MULTILINE)
    tested = re.findall(r"^\s+alertname: (\w+)$", TESTS.read_text(), re.MULTILINE)
    assert len(alerts) == 9
    assert set(alerts) == set(tested)
