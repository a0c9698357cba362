"""``fanout demo --json``, run as a user runs it: its result is one JSON object on stdout, the
status lines on stderr, and its check passes (issue 43 part 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.second_lane]


def test_the_demos_result_is_one_json_object_on_stdout(tmp_path: Path) -> None:
    argv = ["demo", "--duration", "8", "--subscribers", "4", "--agents", "300", "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "fanout", *argv, "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = result.stdout.splitlines()
    report = json.loads(line)
    assert report["check"]["passed"] is True and report["check"]["failures"] == []
    assert report["subscribers"] == 4 and report["updates"] > 0
    assert report["lag_ms"]["p50"] <= report["lag_ms"]["p99"]
    assert report["egress"]["pushes"] > 0
    assert "check passed" in result.stderr and "starting the publisher" in result.stderr
