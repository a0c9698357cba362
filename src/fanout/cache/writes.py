"""A snoopy cache's writes (``cache.client`` rule 4): to PostgreSQL, in one transaction; the
change comes back to every cache through the connector. The reference is ``docs/caches.md``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import sql

from fanout.errors import FanoutError
from fanout.wire.bus import Row, TypeInfo


class NotStored(FanoutError):
    """A write to a type that is not stored in PostgreSQL, or with columns it does not have."""

    code = "bad_request"


class Transaction:
    """Writes in one PostgreSQL transaction (``SnoopyCache.transaction``)."""

    def __init__(self, types: Callable[[str], TypeInfo], connection: Any) -> None:
        self.types = types
        self.connection = connection

    def _table(self, type_name: str) -> tuple[TypeInfo, str]:
        info = self.types(type_name)
        if info.table is None:
            raise NotStored(f"type {type_name!r} is not stored in PostgreSQL")
        return info, info.table

    async def save(self, type_name: str, row: Row) -> None:
        """Insert the row, or update the object with its key.

        Raises:
            UnknownType: not a type served. NotStored: not in PostgreSQL, or a column it does
                not have, or no key.
        """
        info, table = self._table(type_name)
        unknown = sorted(set(row) - set(info.columns))
        if unknown or info.key not in row:
            what = f"columns {unknown}" if unknown else f"no key column {info.key!r}"
            raise NotStored(f"type {type_name!r}: {what} (it has {sorted(info.columns)})")
        columns = list(row)
        updates = [c for c in columns if c != info.key]
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) DO ").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
            sql.Identifier(info.key),
        )
        if updates:
            statement += sql.SQL("UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                    for c in updates
                )
            )
        else:
            statement += sql.SQL("NOTHING")
        await self.connection.execute(statement, [row[c] for c in columns])

    async def delete(self, type_name: str, key: int | str) -> None:
        """Delete the object with ``key`` (nothing if there is none)."""
        info, table = self._table(type_name)
        statement = sql.SQL("DELETE FROM {} WHERE {} = %s").format(
            sql.Identifier(table), sql.Identifier(info.key)
        )
        await self.connection.execute(statement, [key])

    async def execute(self, query: str, params: Any = None) -> Any:
        """Run any SQL in the transaction (a conditional update, say); returns its cursor."""
        return await self.connection.execute(query, params)
