"""A throwaway PostgreSQL server: for the tests and benchmarks of what fanout keeps in PostgreSQL
(the publisher's log, the postgres source).

The server runs this machine's PostgreSQL programs (``initdb``, ``pg_ctl``: on PATH, or Debian's
``/usr/lib/postgresql/VERSION/bin`` from the ``postgresql`` package) on a temporary folder,
listening on a free loopback port only, with the server's default durability (every commit is
flushed) and logical decoding on (``LOGICAL``: the postgres source reads a replication slot),
and is stopped with ``pg_ctl stop -m immediate`` and its folder removed::

    with throwaway_postgres() as dsn:
        psycopg.connect(dsn)

PostgreSQL refuses to run as root: as root, the server runs as Debian's ``postgres`` account.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from fanout.testing.binaries import ProgramMissing
from fanout.testing.ports import LOOPBACK, free_port

DEBIAN_BINARIES = Path("/usr/lib/postgresql")
#: The role the server is created with (trusted on loopback: no password).
USER = "fanout"
MISSING = str(ProgramMissing("initdb"))
#: Server settings for logical decoding (``sources.postgres_logical``): a few slots and senders.
LOGICAL = {"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "10"}


class PostgresMissing(ProgramMissing):
    """This machine has no PostgreSQL programs (a test skips on it: fanout.testing.needs)."""


class PostgresFailed(RuntimeError):
    """A PostgreSQL program failed; the message holds its output and the server's log."""


def postgres_binaries() -> Path | None:
    """Return the folder holding ``initdb`` and ``pg_ctl``, or None if PostgreSQL is absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        DEBIAN_BINARIES.glob("*/bin/initdb"), key=lambda path: int(path.parts[-3]), reverse=True
    )
    return versions[0].parent if versions else None


@contextlib.contextmanager
def throwaway_postgres(settings: Mapping[str, str] = LOGICAL) -> Iterator[str]:
    """Start a PostgreSQL server in a temporary folder; yield its DSN (user ``fanout``).

    Args:
        settings: server settings (``-c name=value``); ``{"wal_level": "replica"}`` makes a
            server without logical decoding.

    Raises:
        PostgresMissing: PostgreSQL is not installed.
        PostgresFailed: ``initdb`` or ``pg_ctl`` failed (the message says why), or this process
            runs as root and there is no ``postgres`` account to run the server as.
    """
    binaries = postgres_binaries()
    if binaries is None:
        raise PostgresMissing("initdb")
    user = _server_user()
    with contextlib.ExitStack() as cleanup:
        home = Path(tempfile.mkdtemp(prefix="fanout-pg-"))
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(home, account.pw_uid, account.pw_gid)
        data, port, server_log = home / "data", free_port(), home / "server.log"

        def run(program: str, *args: object) -> None:
            _run(binaries / program, [str(arg) for arg in args], user, server_log)

        run("initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses={LOOPBACK} -c port={port} -c unix_socket_directories={home}"
        options += "".join(f" -c {name}={value}" for name, value in settings.items())
        run("pg_ctl", "-D", data, "-l", server_log, "-o", options, "-w", "start")
        cleanup.callback(run, "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        yield f"postgresql://{USER}@{LOOPBACK}:{port}/postgres"


def _server_user() -> str | None:
    """The account to run the server as: None (this one) unless this process runs as root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresFailed(
            "running as root needs a 'postgres' user to run the PostgreSQL server as"
        ) from None
    return "postgres"


def _run(program: Path, args: list[str], user: str | None, server_log: Path) -> None:
    """Run a PostgreSQL program (as ``user``).

    Raises:
        PostgresFailed: it exited non-zero; the message holds its output and the server's log.
    """
    command = [str(program), *args]
    done = subprocess.run(command, user=user, capture_output=True, text=True, check=False)
    if done.returncode:
        logged = server_log.read_text(errors="replace") if server_log.exists() else ""
        raise PostgresFailed(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}{logged}")
