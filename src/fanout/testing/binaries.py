"""The programs fanout's tests start (throwaway servers, stock clients, a browser, checkers), the
Debian package that brings each, and how to find them.

A throwaway server whose program is absent raises :class:`ProgramMissing`, naming the package to
install; :mod:`fanout.testing.needs` turns that into a skip (or, on CI, a failure). The packages
are the README's install lines (Requirements), which ``.ci/run`` runs: ``tests/test_ci.py`` checks
that every package named here is in them.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Mapping
from typing import Final

#: Each program a test starts, and the Debian package that brings it.
PACKAGES: Final[Mapping[str, str]] = {
    "initdb": "postgresql",
    "pg_ctl": "postgresql",
    "nats-server": "nats-server",
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "mosquitto_pub": "mosquitto-clients",
    "mosquitto_sub": "mosquitto-clients",
    "chromium": "chromium",
    "fusermount3": "fuse3",
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "mosquitto": "mosquitto",
    "node": "nodejs",
    # NodeSource's nodejs brings npm; Debian's own nodejs needs its package npm besides.
    "npm": "nodejs",
}
#: Other names a program goes by elsewhere (Chromium's binary, outside Debian).
ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "chromium": ("chromium", "chromium-browser", "google-chrome"),
}
#: Where Debian installs some programs off ``PATH`` (globs).
ELSEWHERE: Final[Mapping[str, tuple[str, ...]]] = {
    "nats-server": ("/usr/sbin/nats-server",),
    "mosquitto": ("/usr/sbin/mosquitto",),
    "initdb": ("/usr/lib/postgresql/*/bin/initdb",),
    "pg_ctl": ("/usr/lib/postgresql/*/bin/pg_ctl",),
}
#: Set (to anything but ``0``) by ``.ci/run``: CI must run every test, none may skip for a
#: missing program.
CI_VARIABLE = "FANOUT_CI"


class ProgramMissing(RuntimeError):
    """A program a test or benchmark starts is not installed on this machine."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.package = PACKAGES[program]
        super().__init__(f"needs {program} (Debian package {self.package})")


def find(program: str) -> str | None:
    """The path of ``program`` (a key of :data:`PACKAGES`): on ``PATH``, else where Debian puts
    it; None if it is not installed."""
    if program not in PACKAGES:
        raise KeyError(f"{program!r} is not one of fanout.testing.binaries.PACKAGES")
    for name in ALIASES.get(program, (program,)):
        found = shutil.which(name)
        if found is not None:
            return found
    for pattern in ELSEWHERE.get(program, ()):
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[-1]
    return None


def require(program: str) -> str:
    """The path of ``program``.

    Raises:
        ProgramMissing: it is not installed (the message names its Debian package).
    """
    found = find(program)
    if found is None:
        raise ProgramMissing(program)
    return found


def on_ci() -> bool:
    """Whether this run is CI's (``FANOUT_CI`` set, as ``.ci/run`` does)."""
    return os.environ.get(CI_VARIABLE, "0") not in ("", "0")
