"""The README's install lines are what CI installs: ``.ci/run`` runs them verbatim, checks that
they brought every program, and the tests' programs are among them, so none can drift."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fanout.testing.binaries import PACKAGES

ROOT = Path(__file__).parents[1]
MARKER = "<!-- install lines: .ci/run runs this block"
RUN = ROOT / ".ci" / "run"


def readme_install_lines() -> list[str]:
    """The lines of the README's fenced block after the marker (blank and comment lines aside)."""
    text = (ROOT / "README.md").read_text()
    assert text.count(MARKER) == 1, "the README marks one block of install lines"
    after = text.split(MARKER, 1)[1]
    block = re.search(r"^```\w*\n(.*?)^```", after, re.DOTALL | re.MULTILINE)
    assert block is not None, "a fenced block follows the marker"
    lines = [line.strip() for line in block[1].splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def installed_packages(line: str) -> list[str]:
    """The packages an ``apt-get install`` line names."""
    words = line.split("#", 1)[0].split()
    assert words[:2] == ["apt-get", "install"], line
    return [word for word in words[2:] if not word.startswith("-")]


def test_the_readme_has_one_line_to_run_fanout_and_one_to_test_it() -> None:
    update, run, test = readme_install_lines()
    assert update == "apt-get update"
    assert {"openjdk-17-jre-headless", "python3.11-venv", "gcc"} <= set(installed_packages(run))
    assert {"postgresql", "nats-server", "prometheus"} <= set(installed_packages(test))


def test_ci_runs_the_readmes_lines_as_they_are_written() -> None:
    printed = subprocess.run(
        [str(RUN), "--print-install-lines"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert printed.splitlines() == readme_install_lines()
    assert MARKER in RUN.read_text()  # the same marker, in .ci/run and here


def test_every_check_of_ci_is_for_a_package_of_the_readme_and_back() -> None:
    """.ci/run checks, after installing, that each package did bring its program: every package
    of the README's lines has its check, and no check names a package the lines lack."""
    checks = dict(re.findall(r'^\s+"(need_\w+) ([\w.+-]+)"$', RUN.read_text(), re.MULTILINE))
    for function in checks:
        assert re.search(rf"^{function}\(\) {{", RUN.read_text(), re.MULTILINE), function
    packages = {p for line in readme_install_lines()[1:] for p in installed_packages(line)}
    assert set(checks.values()) <= packages
    assert packages - set(checks.values()) == set()


def test_every_program_the_tests_start_comes_with_the_readmes_lines() -> None:
    """A program a test needs (fanout.testing.binaries) is brought by the README's lines, so
    that on CI, where a missing one fails its test, it is never missing."""
    packages = {p for line in readme_install_lines()[1:] for p in installed_packages(line)}
    assert set(PACKAGES.values()) - packages == set()


def test_ci_runs_the_tests_as_ci() -> None:
    """With FANOUT_CI set, a test whose program is missing fails instead of skipping."""
    assert re.search(r"^\s+FANOUT_CI=1 .*make test$", RUN.read_text(), re.MULTILINE)
