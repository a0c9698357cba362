"""A throwaway PostgreSQL server for the publisher's tests (the log's shared backend).

The server is started once per test session with the PostgreSQL binaries of this machine
(``initdb``, ``pg_ctl``: on PATH, or Debian's ``/usr/lib/postgresql/VERSION/bin`` from the
``postgresql`` package), in a temporary folder, listening on a free loopback port, and stopped
with ``pg_ctl stop -m immediate``. Tests that use it are skipped only when the binaries are absent.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DEBIAN_BINARIES = Path("/usr/lib/postgresql")


def postgres_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or None if PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        DEBIAN_BINARIES.glob("*/bin/initdb"), key=lambda path: int(path.parts[-3]), reverse=True
    )
    return versions[0].parent if versions else None


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_user() -> str | None:
    # PostgreSQL refuses to run as root; as root, run it as Debian's ``postgres`` account.
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail("running as root needs a 'postgres' user to run the PostgreSQL server as")
    return "postgres"


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a PostgreSQL server in a temporary folder; yields its DSN (user ``fanout``)."""
    binaries = postgres_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    user = _server_user()
    with contextlib.ExitStack() as cleanup:
        home = Path(tempfile.mkdtemp(prefix="fanout-pg-"))
        cleanup.callback(shutil.rmtree, home)
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(home, account.pw_uid, account.pw_gid)
        data, port, server_log = home / "data", free_port(), home / "server.log"
        run = _runner(binaries, user, server_log)
        run("initdb", "-D", data, "-U", "fanout", "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={home}"
        run("pg_ctl", "-D", data, "-l", server_log, "-o", options, "-w", "start")
        cleanup.callback(run, "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        yield f"postgresql://fanout@127.0.0.1:{port}/postgres"


def _runner(binaries: Path, user: str | None, server_log: Path) -> Callable[..., None]:
    """Runs a PostgreSQL program (as ``user``); a failure fails the test with its output."""

    def run(program: str, *args: object) -> None:
        command = [str(binaries / program), *map(str, args)]
        done = subprocess.run(command, user=user, capture_output=True, text=True, check=False)
        if done.returncode:
            logged = server_log.read_text() if server_log.exists() else ""
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}{logged}")

    return run


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL server running for the whole test session."""
    with throwaway_postgres() as dsn:
        yield dsn
