"""A logical replication slot read as a stream, through PostgreSQL's replication protocol
(``START_REPLICATION``, psycopg2's replication cursor): the server decodes each transaction
once, as it is written, where the slot functions decoded the WAL again at every read and every
advance (docs/configuration.md, "Capture by logical decoding"). Rules:

1. **Open** from the slot's confirmed position: the server sends again every transaction not
   yet confirmed, so nothing is lost across reconnections or restarts.
2. **Caught up.** ``catch_up(target)`` reads until the server says it has sent the WAL up to
   ``target`` (a status update asking for a reply; the keepalive's position), so that a read
   sees every transaction committed before it began, as a peek did.
3. **Held until confirmed.** Transactions received stay, in commit order, until ``confirm``
   passes their end; a read stops pumping once it has enough, so the server waits, not memory.
4. **Confirmed when durable.** ``confirm`` sends the flush position: the server may then drop
   the WAL before it. A connection lost is opened again; what it held is sent again (rule 1).
5. **A temporary slot** (a live tail's) lives as long as the stream; ``receive`` holds none.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg2
import psycopg2.errors
import psycopg2.extras

from fanout.publisher.sources import pgoutput

#: Seconds between the standby status updates the client sends while reading (the server's
#: ``wal_sender_timeout``, 60 s by default, closes a stream silent for longer).
STATUS_INTERVAL = 10.0
#: Seconds between two requests for the server's position while catching up.
ASK_EVERY = 0.05

Enough = Callable[[list[pgoutput.Transaction]], bool]


class SlotStream:
    """The transactions of one slot's stream, received and not yet confirmed (rules 1-4)."""

    def __init__(self, url: str, slot: str, publication: str, session: str) -> None:
        """
        Args:
            url: the database, as psycopg takes it.
            slot: the logical replication slot (``pgoutput``).
            publication: the publication naming the table.
            session: ``-c name=value`` settings of the server's session, whose output
                functions spell the values it sends.
        """
        self.url, self.slot, self.publication, self.session = url, slot, publication, session
        self.held: list[pgoutput.Transaction] = []
        self._connection: Any = None
        self._cursor: Any = None
        self._assembler = pgoutput.Assembler()

    @property
    def open(self) -> bool:
        return self._cursor is not None

    @property
    def sent(self) -> int:
        """The WAL position the server said it has sent up to (0: nothing said yet)."""
        return int(self._cursor.wal_end) if self._cursor is not None else 0

    def start(self, temporary: bool = False) -> int:
        """Open the stream from the slot's confirmed position (rule 1); ``temporary``: make
        the slot first, for this session only (rule 5).

        Returns:
            Where a temporary slot starts (its consistent point: it sends the transactions
            ending after it); 0 for a slot there already.

        Raises:
            psycopg2.Error: the server refused (the slot is gone, in use by another stream,
                the role lacks REPLICATION) or cannot be reached.
        """
        self.close()
        given = psycopg.conninfo.conninfo_to_dict(self.url).get("options") or ""
        connection = psycopg2.connect(
            psycopg.conninfo.make_conninfo(self.url, options=f"{given} {self.session}".strip()),
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
        )
        begins = 0
        try:
            cursor = connection.cursor()
            if temporary:
                cursor.execute(
                    f'CREATE_REPLICATION_SLOT "{self.slot}" TEMPORARY LOGICAL pgoutput'
                    " NOEXPORT_SNAPSHOT"
                )
                begins = pgoutput.lsn_of(cursor.fetchone()[1])
            cursor.start_replication(
                slot_name=self.slot,
                decode=False,
                start_lsn=0,
                options={"proto_version": "1", "publication_names": self.publication},
                status_interval=STATUS_INTERVAL,
            )
        except BaseException:
            connection.close()
            raise
        self._connection, self._cursor = connection, cursor
        self.held, self._assembler = [], pgoutput.Assembler()
        return begins

    def close(self) -> None:
        """Close the stream; what it held is sent again when it opens (rule 4)."""
        if self._connection is not None:
            self._connection.close()
        self._connection = self._cursor = None

    def catch_up(self, target: int, enough: Enough, timeout: float) -> bool:
        """Read until the server has sent the WAL up to ``target``, or what is held is
        ``enough``, or ``timeout`` seconds passed (rule 2). Returns whether it caught up.

        Raises:
            psycopg2.Error: the stream broke (the caller opens it again).
            pgoutput.DecodeError: the server sent what is not pgoutput.
        """
        deadline, asked = time.monotonic() + timeout, 0.0
        while True:
            self._drain()
            if self.sent >= target:
                return True
            if enough(self.held) or time.monotonic() > deadline:
                return False
            now = time.monotonic()
            if now - asked >= ASK_EVERY:
                self._cursor.send_feedback(reply=True, force=True)
                asked = now
            select.select([self._cursor], [], [], ASK_EVERY)

    def receive(self, timeout: float) -> list[pgoutput.Transaction]:
        """The transactions completed since the last call, waiting up to ``timeout`` seconds
        for one; handed over, not held (rule 5).

        Raises:
            psycopg2.Error, pgoutput.DecodeError: as ``catch_up``.
        """
        self._drain()
        if not self.held:
            select.select([self._cursor], [], [], timeout)
            self._drain()
        done, self.held = self.held, []
        return done

    def confirm(self, lsn: int) -> None:
        """Everything up to ``lsn`` is durable: let it go, and tell the server (rule 4)."""
        self.held = [t for t in self.held if t.end_lsn > lsn]
        if self._cursor is not None:
            self._cursor.send_feedback(flush_lsn=lsn, force=True)

    def _drain(self) -> None:
        """Take every message the connection has already received, without waiting."""
        while (message := self._cursor.read_message()) is not None:
            done = self._assembler.feed(pgoutput.decode(bytes(message.payload)))
            if done is not None:
                self.held.append(done)


def in_use(exc: psycopg2.Error) -> bool:
    """Whether the server refused the stream because another still holds the slot (its
    previous reader's connection not yet gone)."""
    return isinstance(exc, psycopg2.errors.ObjectInUse)
