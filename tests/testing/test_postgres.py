"""A throwaway PostgreSQL server (testing/postgres.py), started for real where PostgreSQL is
installed."""

from __future__ import annotations

import stat
from pathlib import Path

import psycopg
import pytest

from fanout.testing import postgres
from fanout.testing.postgres import PostgresFailed, PostgresMissing, throwaway_postgres

needs_postgres = pytest.mark.needs("initdb", "pg_ctl")


@needs_postgres
def test_a_server_serves_on_loopback_until_the_block_ends_and_leaves_nothing() -> None:
    with throwaway_postgres() as dsn:
        assert dsn.startswith("postgresql://fanout@127.0.0.1:")
        with psycopg.connect(dsn, autocommit=True) as db:
            assert db.execute("SELECT 1 + 1").fetchone() == (2,)
            assert db.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
            assert db.execute("SHOW fsync").fetchone() == ("on",)  # commits are durable
            assert db.execute("SHOW wal_level").fetchone() == ("logical",)  # slots decode
            (sockets,) = db.execute("SHOW unix_socket_directories").fetchone() or ("",)
    home = Path(sockets)  # the server's throwaway directory (its data, log and socket)
    assert home.name.startswith("fanout-pg-")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)
    assert not home.exists()  # other servers (other tests' meanwhile) are not this one's concern


def test_without_postgresql_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "postgres_binaries", lambda: None)
    with pytest.raises(PostgresMissing, match=r"Debian package postgresql"), throwaway_postgres():
        pass


def test_a_program_that_fails_is_quoted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    initdb = tmp_path / "initdb"
    initdb.write_text("#!/bin/sh\necho 'initdb: cannot create the cluster' >&2\nexit 1\n")
    initdb.chmod(initdb.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setattr(postgres, "postgres_binaries", lambda: tmp_path)
    monkeypatch.setattr(postgres, "_server_user", lambda: None)  # as root too: run it as is
    with (
        pytest.raises(PostgresFailed, match="initdb: cannot create the cluster"),
        throwaway_postgres(),
    ):
        pass
