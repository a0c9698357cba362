"""A throwaway PostgreSQL server for the publisher's tests (the log's shared backend, the postgres
source), started once per test session (``fanout.testing.postgres``). Tests that use it are
skipped only when PostgreSQL is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL server running for the whole test session."""
    need("initdb", "pg_ctl")
    with throwaway_postgres() as dsn:
        yield dsn
