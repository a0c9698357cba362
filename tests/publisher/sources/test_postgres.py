"""The postgres source's capture chosen once (``sources.postgres`` rule 1): logical decoding
where the server and role allow it, a trigger otherwise or when asked; an explicit choice the
server cannot honour is a clear error. Real servers: the session's (``wal_level = logical``)
and one of this module's without logical decoding."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from fanout.errors import ConfigError
from fanout.publisher.sources.postgres import install
from fanout.publisher.sources.postgres_logical import LogicalStreamReader, capture_name
from fanout.publisher.sources.postgres_reader import CaptureError, ReaderOptions
from fanout.publisher.sources.postgres_trigger import TriggerStreamReader
from fanout.testing.capture import execute
from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres

COLUMNS = {"id": "long"}
SCHEMA = StructType([StructField("id", LongType())])


@pytest.fixture(scope="module")
def replica_dsn() -> Iterator[str]:
    """A server without logical decoding (``wal_level = replica``, its default)."""
    need("initdb", "pg_ctl")
    with throwaway_postgres({"wal_level": "replica"}) as dsn:
        yield dsn


def slots(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as db:
        return [name for (name,) in db.execute("SELECT slot_name FROM pg_replication_slots")]


def test_wal_level_not_logical_is_a_clear_error_or_the_trigger(replica_dsn: str) -> None:
    execute(replica_dsn, "CREATE TABLE items (id bigint PRIMARY KEY)")
    with pytest.raises(
        CaptureError, match=r"wal_level is 'replica', not 'logical' \(set wal_level"
    ):
        install(replica_dsn, "items", "id", COLUMNS, "logical")
    assert install(replica_dsn, "items", "id", COLUMNS) == "trigger"  # auto: said in the log
    assert install(replica_dsn, "items", "id", COLUMNS, "trigger") == "trigger"


def test_a_role_without_replication_is_a_clear_error(postgres_dsn: str) -> None:
    execute(postgres_dsn, "CREATE ROLE clerk LOGIN", "CREATE DATABASE clerks OWNER clerk")
    clerk = postgres_dsn.replace("fanout@", "clerk@").replace("/postgres", "/clerks")
    execute(clerk, "CREATE TABLE clerk_items (id bigint PRIMARY KEY)")
    with pytest.raises(CaptureError, match="the role lacks REPLICATION"):
        install(clerk, "clerk_items", "id", COLUMNS, "logical")
    assert install(clerk, "clerk_items", "id", COLUMNS) == "trigger"


def test_a_key_outside_the_replica_identity_is_refused(postgres_dsn: str) -> None:
    execute(postgres_dsn, "CREATE TABLE loose (id bigint, n int)")  # no primary key
    with pytest.raises(CaptureError, match=r"replica identity does not hold the key 'id'"):
        install(postgres_dsn, "loose", "id", COLUMNS, "logical")
    execute(postgres_dsn, "INSERT INTO loose VALUES (1, 1)", "DELETE FROM loose")  # unharmed
    execute(postgres_dsn, "ALTER TABLE loose REPLICA IDENTITY FULL")
    assert install(postgres_dsn, "loose", "id", COLUMNS, "logical") == "logical"


def test_installing_one_capture_drops_the_other(postgres_dsn: str) -> None:
    """Writers stop paying for a trigger no longer read; a slot no longer read keeps no WAL."""
    execute(postgres_dsn, "CREATE TABLE switched (id bigint PRIMARY KEY)")
    install(postgres_dsn, "switched", "id", COLUMNS, "trigger")
    install(postgres_dsn, "switched", "id", COLUMNS, "logical")
    stream = LogicalStreamReader(
        ReaderOptions(postgres_dsn, "switched", "", 10, "id", "logical"), SCHEMA
    )
    start = stream.initialOffset()
    stream.stop()
    assert capture_name(postgres_dsn, "switched") in slots(postgres_dsn)
    with psycopg.connect(postgres_dsn) as db:
        (triggers,) = db.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'fanout_capture_switched'"
        ).fetchone() or (0,)
    assert triggers == 0
    install(postgres_dsn, "switched", "id", COLUMNS, "trigger")
    assert capture_name(postgres_dsn, "switched") not in slots(postgres_dsn)
    trigger = TriggerStreamReader(ReaderOptions(postgres_dsn, "switched", "", 10), SCHEMA)
    with pytest.raises(CaptureError, match='started with capture = "logical"'):
        trigger.read(start)  # a stream keeps the capture it started with
    trigger.stop()
    with pytest.raises(CaptureError, match='started with capture = "trigger"'):
        stream.read({"id": 0})


def test_capture_options_are_checked(postgres_dsn: str) -> None:
    with pytest.raises(ConfigError, match="capture='cdc'"):
        ReaderOptions.from_options(
            {"url": "postgresql://x", "table": "t", "schema": "a int", "capture": "cdc"}
        )
    with pytest.raises(CaptureError, match="capture 'cdc' is not auto, logical or trigger"):
        install(postgres_dsn, "switched", "id", COLUMNS, "cdc")
