"""Subscriptions held while the relay does not yet know their dataset.

A relay that has not (yet) had a catalog from its publisher — it has just started, or the
publisher is away — cannot tell a dataset it will serve from one that does not exist. Turning
the subscriber away would turn away everyone who connects during a relay or publisher restart;
instead the request is held here until the catalog arrives (then it is taken as if it had just
come) or until ``wait`` seconds have passed (then it is refused with ``unavailable``, and the
subscriber may try another relay). Held requests count towards the connection's subscriptions
and are bounded in all (``limit``): a flood of them is refused, not stored.

Pure: times are given by the caller (the relay's housekeeping), nothing here reads a clock.
"""

from __future__ import annotations

import collections
import dataclasses

from fanout.wire.messages import Error, Subscribe

#: Seconds a subscription may wait for the catalog.
CATALOG_WAIT = 30.0
#: Subscriptions held at once, over all connections.
MAX_HELD = 10_000


@dataclasses.dataclass(slots=True)
class Held:
    """One subscription request waiting for the catalog.

    Attributes:
        client, request: who asked what.
        deadline: when it is refused; None until the first look at the clock after it came
            (``expired``), so that a caller without a clock at hand may hold requests too.
    """

    client: int
    request: Subscribe
    deadline: float | None


class Holding:
    """Requests held until the catalog, by (client, sub), in the order they came."""

    def __init__(self, wait: float = CATALOG_WAIT, limit: int = MAX_HELD) -> None:
        """
        Args:
            wait: seconds a request is held before it is refused.
            limit: requests held at once; one more is refused at once.
        """
        self.wait = wait
        self.limit = limit
        self._held: dict[tuple[int, int], Held] = {}
        self._counts: collections.Counter[int] = collections.Counter()
        #: Requests refused for want of room, and for waiting too long.
        self.refused_full = 0
        self.expired_total = 0

    def __len__(self) -> int:
        return len(self._held)

    def count(self, client: int) -> int:
        """Requests of ``client`` held now."""
        return self._counts[client]

    def holds(self, client: int, sub: int) -> bool:
        """Whether ``client``'s subscription ``sub`` is held."""
        return (client, sub) in self._held

    def hold(self, client: int, request: Subscribe, now: float | None) -> Error | None:
        """Hold ``request`` (replacing one held under the same ``sub``).

        Returns:
            None if it is held, else the ``Error`` refusing it (no room).
        """
        key = (client, request.sub)
        if key not in self._held and len(self._held) >= self.limit:
            self.refused_full += 1
            message = (
                f"the relay is not connected upstream yet and already holds {self.limit}"
                " subscriptions waiting for it; try another relay or later"
            )
            return Error("unavailable", message, ref=request.sub)
        deadline = None if now is None else now + self.wait
        self._forget(key)  # a replacement goes to the back, as a new request would
        self._held[key] = Held(client, request, deadline)
        self._counts[client] += 1
        return None

    def _forget(self, key: tuple[int, int]) -> None:
        if self._held.pop(key, None) is not None:
            self._counts[key[0]] -= 1
            if not self._counts[key[0]]:
                del self._counts[key[0]]

    def drop(self, client: int, sub: int | None = None) -> bool:
        """Forget ``client``'s request ``sub`` (all of its requests if None).

        Returns:
            Whether anything was held.
        """
        if not self._counts[client]:
            return False
        keys = [key for key in self._held if key[0] == client and sub in (None, key[1])]
        for key in keys:
            self._forget(key)
        return bool(keys)

    def release(self) -> list[Held]:
        """Every held request, in the order they came, no longer held (the catalog came)."""
        held = list(self._held.values())
        self._held.clear()
        self._counts.clear()
        return held

    def expired(self, now: float) -> list[tuple[int, Error]]:
        """Refuse the requests whose wait is over at ``now``.

        Returns:
            (client, ``Error``) for each refused request.
        """
        refused: list[tuple[int, Error]] = []
        for key, held in list(self._held.items()):
            if held.deadline is None:
                held.deadline = now + self.wait
            elif held.deadline <= now:
                self._forget(key)
                self.expired_total += 1
                message = (
                    f"dataset {held.request.dataset!r}: the relay has not been connected"
                    f" upstream for {self.wait:g} s; try another relay or later"
                )
                refused.append((held.client, Error("unavailable", message, ref=key[1])))
        return refused
