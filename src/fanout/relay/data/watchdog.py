"""A time limit on the relay's DuckDB statements.

Subscribers' SQL runs on the event loop, between two pushes (``relay.data.tables``, rule 2), so a
query that runs for long — a join that multiplies two large tables, say — would stop every other
subscriber's pushes meanwhile. The watchdog interrupts a statement still running after ``limit``
seconds (DuckDB's ``interrupt``, callable from another thread), and again every ``REPEAT``
seconds until it ends: an interrupt that comes between binding and executing it is lost. The
statement raises ``duckdb.InterruptException``; the connection stays usable.

One daemon thread serves a watchdog's statements, started on first use and ended after
``IDLE_EXIT`` seconds without one; arming and disarming it is a lock (and a notify when the thread
was idle). The lock keeps an interrupt meant for one statement from reaching the next: the thread
interrupts only while the statement it timed is armed, and a statement is disarmed (under the
lock) before the next starts. An interrupt that reaches an idle connection is ignored by DuckDB.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator

import duckdb

#: Seconds without a statement after which the watchdog's thread ends (the next one starts it).
IDLE_EXIT = 30.0
#: Seconds between interrupts of a statement still running past its limit.
REPEAT = 0.05


class Watchdog:
    """Interrupts a statement run under ``watching`` once it has run ``limit`` seconds."""

    def __init__(self, limit: float) -> None:
        if not (limit > 0 and math.isfinite(limit)):
            raise ValueError(f"a statement time limit must be > 0 seconds, not {limit}")
        self.limit = limit
        self.interrupted = 0
        self._lock = threading.Condition()
        # (deadline, connection, statement number) of the statement running, if any
        self._armed: tuple[float, duckdb.DuckDBPyConnection, int] | None = None
        self._statements = 0
        self._interrupted_last = 0  # the statement last interrupted (counted once)
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits for a statement, not for a deadline

    @contextlib.contextmanager
    def watching(self, db: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Run the statement of the ``with`` block on ``db`` under the time limit."""
        with self._lock:
            self._statements += 1
            self._armed = (time.monotonic() + self.limit, db, self._statements)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="fanout-sql-watchdog", daemon=True
                )
                self._thread.start()
            elif self._idle:
                # Woken only from its idle wait: waiting for an earlier statement's deadline,
                # it finds this one's when that passes, so a busy relay's queries do not each
                # wake it (and take the GIL from the event loop).
                self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._armed = None

    def _watch(self) -> None:
        with self._lock:
            while True:
                if self._armed is None:
                    self._idle = True
                    woken = self._lock.wait(IDLE_EXIT)
                    self._idle = False
                    if not woken and self._armed is None:
                        self._thread = None
                        return
                    continue
                # No reference to the connection is kept while waiting: it is closed with its
                # store, not held by this thread till the interpreter exits.
                left = self._armed[0] - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                deadline, db, statement = self._armed
                db.interrupt()
                if statement != self._interrupted_last:
                    self.interrupted += 1
                    self._interrupted_last = statement
                self._armed = (time.monotonic() + REPEAT, db, statement)  # again, if it was lost
                del deadline, db  # no reference to the connection while waiting (above)
