"""The relay's upstream store: primitives it holds at the publisher (CA 3197003's subscriber data
store).

A primitive is *ready* once the batch carrying its snapshot has been applied; only ready
primitives may serve subscribers, so a subscriber never sees a half-filled region. A primitive no
longer needed by any subscription is released after a grace period, so a view that moves back
and forth does not make the relay churn upstream subscriptions.

Entity primitives (``views.entity``: the row of one key, held for views relative to it) are held
like the others but are in no cover index: they cover no region; ``entity`` finds them by key.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from fanout.relay.core.sends import UPSTREAM, Send
from fanout.views import CoverIndex, View
from fanout.views.entity import Entity
from fanout.views.region import REGIONS
from fanout.wire.messages import Release


@dataclass
class Primitive:
    """One upstream primitive.

    Attributes:
        prim: our id for it, unique for the relay's lifetime.
        dataset: the dataset it selects from.
        view: what it selects.
        ready: its snapshot has been applied.
        ready_seq: the seq of the state it became ready in: from the next seq on, the relay's
            batches hold every change inside it (-1 while not ready).
        unneeded_since: when it stopped being needed (monotonic seconds), or None.
    """

    prim: int
    dataset: str
    view: View
    ready: bool = False
    ready_seq: int = -1
    unneeded_since: float | None = None


class Upstream:
    """Primitives held at the publisher, by id, with cover indexes per dataset."""

    def __init__(self) -> None:
        self._prims: dict[int, Primitive] = {}
        self._ids = itertools.count(1)
        self._all: dict[str, CoverIndex] = {}
        self._ready: dict[str, CoverIndex] = {}
        self._pending: dict[str, int] = {}
        self._entities: dict[tuple[str, Entity], Primitive] = {}
        self.added = 0  # primitives ever added: each an Acquire, a snapshot at the publisher

    def __iter__(self) -> Iterator[Primitive]:
        return iter(list(self._prims.values()))

    def __len__(self) -> int:
        return len(self._prims)

    def get(self, prim: int) -> Primitive | None:
        """The primitive with id ``prim``, if held."""
        return self._prims.get(prim)

    def add(self, dataset: str, view: View) -> Primitive:
        """Record a new primitive (not ready until its snapshot arrives)."""
        primitive = Primitive(next(self._ids), dataset, view)
        self._prims[primitive.prim] = primitive
        self.added += 1
        if isinstance(view, Entity):
            self._entities[(dataset, view)] = primitive
        elif isinstance(view, REGIONS):  # the cover index is of regions; other kinds: ``views``
            self.cover(dataset).add(view)
        self._pending[dataset] = self.pending(dataset) + 1
        return primitive

    def remove(self, prim: int) -> Primitive:
        """Forget a primitive.

        Raises:
            KeyError: ``prim`` is not held.
        """
        primitive = self._prims.pop(prim)
        region = isinstance(primitive.view, REGIONS)
        if isinstance(primitive.view, Entity):
            self._entities.pop((primitive.dataset, primitive.view), None)
        elif region:
            self.cover(primitive.dataset).remove(primitive.view)
        if primitive.ready:
            if region:
                self.cover(primitive.dataset, ready_only=True).remove(primitive.view)
        else:
            self._pending[primitive.dataset] -= 1
        return primitive

    def make_ready(self, primitive: Primitive) -> None:
        """Its snapshot has been applied (and swapped in): it may serve subscribers."""
        if not primitive.ready and primitive.prim in self._prims:
            primitive.ready = True
            if isinstance(primitive.view, REGIONS):
                self.cover(primitive.dataset, ready_only=True).add(primitive.view)
            self._pending[primitive.dataset] -= 1

    def pending(self, dataset: str) -> int:
        """How many primitives of ``dataset`` wait for their snapshot."""
        return self._pending.get(dataset, 0)

    def entity(self, dataset: str, key: int | str) -> Primitive | None:
        """The entity primitive of ``key`` in ``dataset``, if held."""
        return self._entities.get((dataset, Entity(key)))

    def cover(self, dataset: str, ready_only: bool = False) -> CoverIndex:
        """The cover index of the region primitives of ``dataset`` (only ready ones if asked)."""
        indexes = self._ready if ready_only else self._all
        index = indexes.get(dataset)
        if index is None:
            index = indexes[dataset] = CoverIndex()
        return index

    def views(self, dataset: str, ready_only: bool = False) -> list[View]:
        """The views of the primitives of ``dataset`` (only ready ones if asked)."""
        return [
            p.view
            for p in self._prims.values()
            if p.dataset == dataset and (p.ready or not ready_only)
        ]

    def of(self, dataset: str) -> list[Primitive]:
        """The primitives of ``dataset``."""
        return [p for p in self._prims.values() if p.dataset == dataset]

    def unready(self, prims: Collection[int] | None = None) -> None:
        """Mark primitives ``prims`` (default: all, the upstream connection was lost) not
        ready: they wait for their snapshots again."""
        for primitive in self._prims.values():
            if primitive.ready and (prims is None or primitive.prim in prims):
                primitive.ready, primitive.ready_seq = False, -1
                if isinstance(primitive.view, REGIONS):
                    self.cover(primitive.dataset, ready_only=True).remove(primitive.view)
                self._pending[primitive.dataset] = self.pending(primitive.dataset) + 1


def release_spare(
    upstream: Upstream, prims: list[Primitive], spare: set[int], now: float, grace: float
) -> tuple[list[Primitive], list[Send]]:
    """Release the ``spare`` primitives among ``prims`` that have been unneeded for ``grace``
    seconds; the others' grace clocks restart. Returns the released ones and their ``Release``
    frames.

    Spare means every view a primitive touches stays covered by the other ready primitives, so
    no subscription's coverage changes when it goes.
    """
    released: list[Primitive] = []
    sends: list[Send] = []
    for prim in prims:
        if prim.prim not in spare:
            prim.unneeded_since = None
            continue
        if prim.unneeded_since is None:
            prim.unneeded_since = now
        if now - prim.unneeded_since >= grace:
            upstream.remove(prim.prim)
            sends.append(Send(UPSTREAM, Release(prim.prim)))
            released.append(prim)
    return released, sends
