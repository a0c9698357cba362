"""A snoopy cache's writes (cache.writes) to a real PostgreSQL: in one transaction, refused
clearly when they cannot be done. (That they come back through the connector is
tests/integration/test_auction.py's.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import pytest_asyncio

from fanout.cache.client import SnoopyCache, UnknownType
from fanout.cache.writes import NotStored
from fanout.testing.needs import need
from fanout.testing.postgres import throwaway_postgres
from fanout.wire.bus import TypeInfo

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    need("initdb", "pg_ctl")
    with throwaway_postgres() as url, psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE items (id bigint PRIMARY KEY, title text, category text)")
        yield url


@pytest_asyncio.fixture(loop_scope="module")
async def cache(database: str) -> AsyncIterator[SnoopyCache]:
    """A cache whose types are given (no bus is needed to write)."""
    types = {
        "item": TypeInfo(
            "id",
            True,
            "category",
            {"id": "long", "title": "string", "category": "string"},
            table="items",
        ),
        "tick": TypeInfo("id", True, None, {"id": "long"}),
    }
    nc = _NoBus()
    yield SnoopyCache(nc, "shop", types, capacity=10, snoop=True, db=database)


class _NoBus:
    """Writes never touch the bus: anything they would call on it fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a write used the bus ({name})")


def rows(url: str) -> list[tuple]:
    with psycopg.connect(url) as db:
        return db.execute("SELECT id, title, category FROM items ORDER BY id").fetchall()


async def test_save_inserts_then_updates_and_delete_deletes(
    cache: SnoopyCache, database: str
) -> None:
    await cache.save("item", {"id": 1, "title": "lamp", "category": "home"})
    await cache.save("item", {"id": 1, "title": "lamp, used"})  # only the columns given
    await cache.save("item", {"id": 2, "title": "rake", "category": "garden"})
    assert rows(database) == [(1, "lamp, used", "home"), (2, "rake", "garden")]
    await cache.delete("item", 2)
    assert rows(database) == [(1, "lamp, used", "home")]


async def test_a_transaction_is_all_or_nothing(cache: SnoopyCache, database: str) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with cache.transaction() as tx:
            await tx.save("item", {"id": 3, "title": "chair", "category": "home"})
            await tx.delete("item", 1)
            raise RuntimeError("changed my mind")
    assert rows(database) == [(1, "lamp, used", "home")]
    async with cache.transaction() as tx:
        await tx.save("item", {"id": 3, "title": "chair", "category": "home"})
        cursor = await tx.execute("UPDATE items SET title = 'sold' WHERE id = %s", (1,))
        assert cursor.rowcount == 1
    assert rows(database) == [(1, "sold", "home"), (3, "chair", "home")]


async def test_what_cannot_be_written_is_refused_clearly(cache: SnoopyCache) -> None:
    with pytest.raises(NotStored, match=r"columns \['price'\]"):
        await cache.save("item", {"id": 4, "price": 3})
    with pytest.raises(NotStored, match="no key column 'id'"):
        await cache.save("item", {"title": "no key"})
    with pytest.raises(NotStored, match="not stored in PostgreSQL"):
        await cache.save("tick", {"id": 1})
    with pytest.raises(UnknownType, match="unknown type 'nope'"):
        await cache.delete("nope", 1)
