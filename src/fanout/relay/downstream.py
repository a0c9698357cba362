"""The relay's downstream store: the subscriptions it serves (000: publisher data store).

Each subscription remembers what its subscriber already holds (the sorted keys last sent and the
seq of that push), so every push is a delta: entered, updated and left rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fanout.views import View

Keys = npt.NDArray[np.int64]
SubKey = tuple[int, int]  # (client, subscription id chosen by that client)


@dataclass
class Subscription:
    """One subscriber's view and what it has received.

    Attributes:
        client: the connection.
        sub: the id the subscriber chose.
        dataset: the dataset viewed.
        view: the current view.
        rate: pushes per second at most.
        sent_keys: sorted keys the subscriber holds.
        sent_seq: seq of the state its last push was cut from (-1: nothing sent yet).
        first: the next push is the subscription's first (sent as ``full``).
        changed: the view changed since the last push (a push is due even without new data).
        servable: whether ready primitives cover the view, as of ``coverage_seen``.
        coverage_seen: the relay's coverage version ``servable`` was computed at.
        last_push: monotonic time of the last push.
        pushes: pushes sent.
    """

    client: int
    sub: int
    dataset: str
    view: View
    rate: float
    sent_keys: Keys = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    sent_seq: int = -1
    first: bool = True
    changed: bool = True
    servable: bool = False
    coverage_seen: int = -1
    last_push: float = float("-inf")
    pushes: int = 0

    @property
    def key(self) -> SubKey:
        """(client, sub)."""
        return (self.client, self.sub)


class Downstream:
    """Subscriptions by (client, sub)."""

    def __init__(self) -> None:
        self._subs: dict[SubKey, Subscription] = {}

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._subs.values()))

    def __len__(self) -> int:
        return len(self._subs)

    def get(self, key: SubKey) -> Subscription | None:
        """The subscription, if any."""
        return self._subs.get(key)

    def put(self, subscription: Subscription) -> None:
        """Add or replace a subscription."""
        self._subs[subscription.key] = subscription

    def remove(self, key: SubKey) -> Subscription | None:
        """Drop a subscription; returns it if it existed."""
        return self._subs.pop(key, None)

    def of_client(self, client: int) -> list[Subscription]:
        """Every subscription of one connection."""
        return [s for s in self._subs.values() if s.client == client]

    def views(self, dataset: str) -> list[View]:
        """Every subscription view of ``dataset``."""
        return [s.view for s in self._subs.values() if s.dataset == dataset]
