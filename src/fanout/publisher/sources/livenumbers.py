"""The numbers a live tail of a logical capture gives committed changes, without I/O: the very
``_version`` the capture's micro-batch will give them (``sources.postgres_tail``). Rules:

1. **Counted from an anchor.** The capture numbers each transaction's changes after the last
   one's, in commit order (``postgres_logical`` rule 3), so any offset it reached, ``(lsn,
   last)``, is an anchor: the changes of the transactions ending after ``lsn`` are ``last + 1``,
   ``last + 2``, ... in the order the slot sends them.
2. **Only an anchor the tail saw past.** The tail's own slot sends the transactions ending after
   its ``start``; an anchor before it could miss some, so the tail waits for one at or after it.
3. **Held, bounded, until anchored**: at most ``max_held`` changes; beyond, the oldest go (never
   shown live: their micro-batch carries them) and ``start`` moves past them.
4. **Then at once**: every later transaction is numbered as it arrives. A later anchor that
   contradicts the count (``check``) is a tail that went wrong: it starts again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: Changes a tail holds at most while it waits for its anchor (rule 3).
MAX_HELD = 10_000
#: Transactions whose count a tail remembers to check later anchors against (rule 4).
REMEMBERED = 1024


@dataclass(frozen=True)
class Held(Generic[T]):
    """A transaction waiting for its numbers: where it ends, its changes, and what it carries."""

    end: int
    changes: int
    payload: T


class Numbering(Generic[T]):
    """One tail's count of a table's changes (rules 1-4)."""

    def __init__(self, start: int, max_held: int = MAX_HELD) -> None:
        """
        Args:
            start: where the tail's slot starts sending transactions (their ends are after it).
            max_held: changes held at most before an anchor (rule 3).
        """
        self.start = start
        self.max_held = max_held
        self.dropped = 0  # changes let go before an anchor (rule 3)
        self._held: deque[Held[T]] = deque()
        self._held_changes = 0
        self._next: int | None = None  # the next change's number, once anchored
        self._counted: deque[tuple[int, int]] = deque(maxlen=REMEMBERED)  # (end, last number)

    @property
    def anchored(self) -> bool:
        return self._next is not None

    def anchor(self, lsn: int, last: int) -> list[tuple[int, T]]:
        """The capture reached ``(lsn, last)``: if it anchors the count (rule 2), the held
        transactions after it with their first numbers, in order; else nothing."""
        if self._next is not None or lsn < self.start:
            return []
        out, number = [], last + 1
        self._counted.append((lsn, last))
        for held in self._held:
            if held.end > lsn:
                out.append((number, held.payload))
                number += held.changes
                self._counted.append((held.end, number - 1))
        self._held.clear()
        self._held_changes = 0
        self._next = number
        return out

    def transaction(self, end: int, changes: int, payload: T) -> list[tuple[int, T]]:
        """A transaction the slot sent (in commit order): its first number, if anchored (rule
        4); else it is held (rule 3) and nothing is returned."""
        if self._next is not None:
            first = self._next
            self._next += changes
            self._counted.append((end, self._next - 1))
            return [(first, payload)]
        self._held.append(Held(end, changes, payload))
        self._held_changes += changes
        while self._held_changes > self.max_held:
            gone = self._held.popleft()
            self._held_changes -= gone.changes
            self.dropped += gone.changes
            self.start = max(self.start, gone.end)
        return []

    def check(self, lsn: int, last: int) -> bool:
        """Whether a later anchor agrees with the count (rule 4); True when the count cannot
        tell (the anchor is older than what it remembers, or newer than what it saw)."""
        if self._next is None or not self._counted or not self._counted[0][0] <= lsn:
            return True
        if lsn > self._counted[-1][0]:
            return True
        through = [number for end, number in self._counted if end <= lsn]
        return through[-1] == last
