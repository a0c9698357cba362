"""The log in a PostgreSQL database (the shared option: several hosts).

psycopg is imported when a log is opened, not with this module: the log's package (and its
interface, which the audit in ``fanout.testing`` reads) loads without the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fanout.publisher.log.sql import Db, SqlLog, schema

if TYPE_CHECKING:
    import psycopg

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: Whether the blobs are stored compressed (``m``, ``x``) or not (``e``: external).
_BLOB_STORAGE = (
    "SELECT attstorage FROM pg_attribute"
    " WHERE attrelid = 'fanout_log'::regclass AND attname = 'rows'"
)


class _PostgresDb:
    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        # Binary results: bytea arrives as raw bytes, not hex text to decode.
        return self.connection.execute(_postgres_sql(sql), params, binary=True).fetchall()

    def change(self, sql: str, *params: object) -> int:
        return self.connection.execute(_postgres_sql(sql), params).rowcount


def _postgres_sql(sql: str) -> str:
    # The shared statements use SQLite's ``?``; none contains a literal ``?`` or ``%``.
    return sql.replace("?", "%s")


class PostgresLog(SqlLog):
    """The log in a PostgreSQL database, shared by several hosts; tables created if missing.

    Connections run with ``synchronous_commit = on`` whatever the server's default, so a commit
    has reached the server's WAL on disk (and its synchronous standbys) when ``append`` returns.
    Like ``SqliteLog``: one write and one read connection, each behind its own lock. A
    connection the server or network dropped is replaced and the operation retried once (a
    warning is logged): every operation of the log is idempotent, so a retry after a lost
    acknowledgement is safe.
    """

    def __init__(self, dsn: str) -> None:
        """Connect to ``dsn`` (a libpq URL or ``key=value`` string) and create the tables.

        Raises:
            psycopg.OperationalError: the server cannot be reached or refuses the login.
        """
        import psycopg  # noqa: PLC0415 (see the module docstring)

        super().__init__("on PostgreSQL")
        self._lost: type[psycopg.OperationalError] = psycopg.OperationalError
        self.dsn = dsn
        self._writer = self._connect()
        try:
            self._createschema()
            self._reader = self._connect()
        except BaseException:
            self._writer.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg  # noqa: PLC0415 (see the module docstring)
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

        params: dict[str, Any] = conninfo_to_dict(self.dsn)
        params.setdefault("application_name", "fanout-log")
        params.setdefault("connect_timeout", 10)
        connection = psycopg.connect(**params, autocommit=True)
        connection.execute("SET synchronous_commit = on")
        return connection

    def _createschema(self) -> None:
        with self._writer.transaction():
            # Hosts starting together would race on CREATE TABLE IF NOT EXISTS (it is not
            # atomic in PostgreSQL); a transaction-scoped advisory lock serialises them.
            self._writer.execute("SELECT pg_advisory_xact_lock(hashtext('fanout_log'))")
            for statement in schema(integer="BIGINT", real="DOUBLE PRECISION", blob="BYTEA"):
                self._writer.execute(statement)
            # Arrow buffers of numbers barely compress, and trying costs appends 3-4x their
            # time (bench/log.py): store the blobs out of line, uncompressed. Altered only when
            # needed, since ALTER TABLE briefly locks out the other hosts' appends.
            (storage,) = self._writer.execute(_BLOB_STORAGE).fetchone() or ("e",)
            if storage != "e":
                self._writer.execute(
                    "ALTER TABLE fanout_log ALTER COLUMN rows SET STORAGE EXTERNAL"
                )

    def _transact(self, work: Callable[[Db], T]) -> T:
        try:
            return self._in_transaction(work)
        except self._lost as exc:
            if not self._writer.broken:
                raise
            self._writer = self._reconnect(self._writer, exc)
        return self._in_transaction(work)

    def _in_transaction(self, work: Callable[[Db], T]) -> T:
        with self._writer.transaction():
            return work(_PostgresDb(self._writer))

    def _query(self, work: Callable[[Db], T]) -> T:
        try:
            return work(_PostgresDb(self._reader))
        except self._lost as exc:
            if not self._reader.broken:
                raise
            self._reader = self._reconnect(self._reader, exc)
        return work(_PostgresDb(self._reader))

    def _reconnect(
        self, broken: psycopg.Connection[Any], error: psycopg.OperationalError
    ) -> psycopg.Connection[Any]:
        # Every operation of the log is idempotent, so the caller runs it once more on the new
        # connection, even if the lost one had committed it.
        logger.warning("publisher log: connection to PostgreSQL lost (%s); reconnecting", error)
        broken.close()
        return self._connect()

    def _disconnect(self) -> None:
        self._writer.close()
        self._reader.close()
