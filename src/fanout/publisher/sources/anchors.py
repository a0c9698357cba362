"""Where a table's logical capture stands, kept in the database for a live tail
(``sources.postgres_logical`` rule 5, ``sources.postgres_tail``): the slot its stream reads
(named by its start), an anchor (a position it read to, with the last change's ``_version``
there), and where a waiting tail's own slot starts. All live in ``fanout_changes`` under the
table's name (``table@slot``, ``table@anchor``, ``table@tail``), so a new stream's snapshot,
which deletes the table's rows there, drops an old stream's anchor too; one read with a slot
not the current one's is no anchor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg

from fanout.publisher.sources import pgoutput


@dataclass(frozen=True)
class Anchor:
    """A position a table's stream reached for good: its slot's start, the end of the last
    transaction read, and the last change's ``_version``."""

    slot: int
    lsn: int
    last: int


def keep_anchor(db: psycopg.Connection[Any], table: str, slot: int, lsn: int, last: int) -> None:
    """Keep ``(lsn, last)`` as the anchor of ``table``'s stream from ``slot``."""
    spelled = {"slot": pgoutput.lsn_text(slot), "lsn": pgoutput.lsn_text(lsn), "id": last}
    db.execute(
        "INSERT INTO fanout_changes VALUES (%s, 0, 'A', %s::jsonb) ON CONFLICT (source, id)"
        " DO UPDATE SET data = excluded.data",
        (anchor_source(table), json.dumps(spelled)),
    )


def anchor_of(db: psycopg.Connection[Any], table: str) -> Anchor | None:
    """The table's anchor, or None: none kept yet, or kept by a stream whose slot was made
    again since."""
    found = db.execute(
        "SELECT a.data, s.data #>> '{}' FROM fanout_changes a JOIN fanout_changes s"
        " ON s.source = %s AND s.id = 0 WHERE a.source = %s AND a.id = 0",
        (slot_source(table), anchor_source(table)),
    ).fetchone()
    if found is None or found[0].get("slot") != found[1]:
        return None
    spelled = found[0]
    lsn_of = pgoutput.lsn_of
    return Anchor(lsn_of(spelled["slot"]), lsn_of(spelled["lsn"]), int(spelled["id"]))


def slot_source(table: str) -> str:
    """``fanout_changes.source`` of the row naming the stream the table's slot is now."""
    return f"{table}@slot"


def anchor_source(table: str) -> str:
    """``fanout_changes.source`` of the table's anchor."""
    return f"{table}@anchor"


def tail_source(table: str) -> str:
    """``fanout_changes.source`` of where a waiting tail's slot starts."""
    return f"{table}@tail"


def wait_for_anchor(db: psycopg.Connection[Any], table: str, start: int) -> None:
    """A tail whose slot starts at ``start`` waits for an anchor at or past it: say so."""
    db.execute(
        "INSERT INTO fanout_changes VALUES (%s, 0, 'T', to_jsonb(%s::text)) ON CONFLICT"
        " (source, id) DO UPDATE SET data = excluded.data",
        (tail_source(table), pgoutput.lsn_text(start)),
    )


def flushed_and_waited(db: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    """The server's WAL flushed so far, and where a waiting tail's slot starts (0: none)."""
    found = db.execute(
        "SELECT pg_current_wal_flush_lsn()::text, (SELECT data #>> '{}' FROM fanout_changes"
        " WHERE source = %s AND id = 0)",
        (tail_source(table),),
    ).fetchone()
    if found is None:
        return 0, 0
    flushed, waits = found
    return pgoutput.lsn_of(flushed), pgoutput.lsn_of(waits) if waits else 0
