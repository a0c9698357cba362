"""The log in one SQLite file (the default: one host)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from fanout.errors import ConfigError
from fanout.publisher.log.sql import Db, SqlLog, schema

T = TypeVar("T")


class _SqliteDb:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def fetch(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        return self.connection.execute(sql, params).fetchall()

    def change(self, sql: str, *params: object) -> int:
        return self.connection.execute(sql, params).rowcount


class SqliteLog(SqlLog):
    """The log in one SQLite file: WAL, ``synchronous=FULL`` (every commit is fsynced).

    Two connections, one for writes and one for reads, each behind its own lock; in WAL mode a
    reader never blocks the writer, so the Spark thread's appends do not wait for replays.
    """

    def __init__(self, path: str | Path) -> None:
        """Open the log at ``path``, creating the file and its folder if missing.

        Raises:
            sqlite3.Error: the file cannot be opened or is not a SQLite database.
            OSError: the folder cannot be created.
            ConfigError: SQLite refuses WAL mode there (a network file system, say).
        """
        super().__init__(str(path))
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = self._connect()
        try:
            self._reader = self._connect()
        except BaseException:
            self._writer.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; ``_transact`` opens its own.
        connection = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        try:
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise ConfigError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            # FULL, not WAL's usual NORMAL: NORMAL can lose the last commits on power loss,
            # and an append must be durable when it returns.
            connection.execute("PRAGMA synchronous=FULL")
            for statement in schema(integer="INTEGER", real="REAL", blob="BLOB"):
                connection.execute(statement)
        except BaseException:
            connection.close()
            raise
        return connection

    def _transact(self, work: Callable[[Db], T]) -> T:
        # IMMEDIATE takes SQLite's write lock at BEGIN, so what ``work`` reads cannot be
        # changed by another process before it writes.
        self._writer.execute("BEGIN IMMEDIATE")
        try:
            result = work(_SqliteDb(self._writer))
        except BaseException:
            self._writer.execute("ROLLBACK")
            raise
        self._writer.execute("COMMIT")
        return result

    def _query(self, work: Callable[[Db], T]) -> T:
        return work(_SqliteDb(self._reader))

    def _disconnect(self) -> None:
        self._writer.close()
        self._reader.close()
