"""The testing package stays light: each module imports only what it works with (testing/)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Hypothesis is a dev dependency: only the strategies module may need it.
HEAVY = ("pyspark", "duckdb", "psycopg", "hypothesis")


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("fanout.testing", ()),
        ("fanout.testing.wait", ()),
        ("fanout.testing.ports", ()),
        ("fanout.testing.frames", ()),
        ("fanout.testing.cpu", ()),
        ("fanout.testing.calibration", ()),
        ("fanout.testing.machine", ()),
        ("fanout.testing.postgres", ()),  # runs PostgreSQL's programs, needs no driver
        ("fanout.testing.binaries", ()),
        ("fanout.testing.needs", ()),  # a pytest plug-in: pytest, not its plug-ins
        ("fanout.testing.publisher", ()),
        ("fanout.testing.audit", ()),  # DuckDB only once a SQL view is audited
        ("fanout.testing.clusterview", ()),
        ("fanout.testing.relays", ("duckdb",)),  # a relay holds its SQL tables in DuckDB
        ("fanout.testing.catalog", ()),
        ("fanout.testing.batches", ()),
        ("fanout.testing.memory", ()),
        ("fanout.testing.relaycore", ("duckdb",)),  # a core holds its SQL tables in DuckDB
        ("fanout.testing.strategies", ("hypothesis",)),
        ("fanout.testing.oracle", ()),
        ("fanout.testing.world", ()),
        ("fanout.testing.sharing", ()),
        ("fanout.testing.sparkstate", ("pyspark", "psycopg")),  # the publisher's stream and sources
    ],
)
def test_a_module_pulls_in_nothing_heavy_it_does_not_use(module: str, allowed: tuple) -> None:
    code = f"import sys, {module}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(done.stdout.split()) <= set(allowed), done.stdout
