"""The forward policy, sans I/O: a relay acquires each part from the relay responsible for it,
and assembles every seq from the pieces its upstreams send (CA 3197003 [0111], [0116], Fig. 9;
docs/cluster.md, "The forward policy"). Rules:

1. **Acquire.** A primitive whose part another live relay owns is acquired there if its name sorts
   after this one's (waits never form a circle); every other, and every one for a relay below, from
   the publisher (``PUBLISHER``). Release goes where it was acquired; the rest to the publisher.
2. **Batches** come in pieces, merged once whole; a peer is expected for a dataset from its first
   primitive until its last is released. Stale snapshots: released and acquired again there.
3. **A peer lost.** Waiting seqs go on without it; its datasets are resynced (from the publisher
   while it is unreachable), ``every`` subscribers catching up by curiosity.
4. **A lapsed lease owns nothing** (``registry`` rule 8): the relay routes by the map without
   itself (:func:`routing_map`) until it serves again. When the map it routes by changes, what is
   held where it is no longer routed is acquired anew (:func:`acquired_anew`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from msgspec.structs import replace

from fanout.cluster.assembly import Assembled, Assembly
from fanout.cluster.merging import merge_pieces
from fanout.cluster.responsibility import ResponsibilityMap, part_of
from fanout.views import View
from fanout.views.entity import Entity
from fanout.wire.messages import Acquire, Batch, Catalog, Release, Resync

#: The name of the publisher among a relay's upstreams.
PUBLISHER = ""
#: Where a primitive of a lost peer was: its release goes nowhere.
GONE = "\x00gone"


@dataclass(frozen=True)
class Held:
    """Where one primitive was acquired: ``upstream`` (a relay's name, or ``PUBLISHER``)."""

    upstream: str
    dataset: str
    view: View


@dataclass
class Taken:
    """What a piece or a lost peer gave.

    Attributes:
        batches: whole seqs for the core, in order.
        sends: (upstream, frame) to send (rule 2).
        resync: per dataset, the primitives the core must acquire anew (rule 3).
    """

    batches: list[Batch]
    sends: list[tuple[str, Acquire | Release]]
    resync: dict[str, set[int]]


class Upstreams:
    """The upstreams of one relay with the forward policy: routes and assemblies."""

    def __init__(self, me: str) -> None:
        """Args:
        me: this relay's name in the map.
        """
        self._me = me
        self.held: dict[int, Held] = {}
        self._assemblies: dict[str, Assembly[Batch]] = {}
        self._keys: dict[str, str] = {}
        #: (dataset, view) acquired for relays below: from the publisher only (rule 1)
        self._for_below: dict[tuple[str, View], int] = {}
        #: primitives acquired from other relays, and seqs assembled of more than one piece
        self.forwarded = 0
        self.assembled = 0

    def on_catalog(self, catalog: Catalog) -> None:
        """Learn the datasets' keys."""
        self._keys = {info.name: info.key for info in catalog.datasets}
        for name in self._keys:
            self._assembly(name)

    def route(
        self,
        frame: object,
        members: ResponsibilityMap,
        reachable: Callable[[str], bool],
        *,
        below: bool = False,
    ) -> str | None:
        """The upstream ``frame`` goes to (rule 1): a relay's name, ``PUBLISHER``, or None
        (the release of a primitive of a lost peer: nothing to send).

        Args:
            frame: a frame the core sends upstream.
            members: the map as last read.
            reachable: whether a relay of the map may be asked now (its link is not failing).
            below: the frame is sent for a relay below this one.
        """
        match frame:
            case Acquire(prim=prim, dataset=dataset, view=view):
                if below:
                    self._for_below[dataset, view] = self._for_below.get((dataset, view), 0) + 1
                upstream = (
                    PUBLISHER
                    if (dataset, view) in self._for_below
                    else self._owner(dataset, view, members, reachable)
                )
                self.held[prim] = Held(upstream, dataset, view)
                if upstream != PUBLISHER:
                    self.forwarded += 1
                    self._assembly(dataset).expect(upstream)
                return upstream
            case Release(prim=prim):
                held = self.held.pop(prim, None)
                if held is None:
                    return PUBLISHER
                self._released(held)
                if held.upstream == PUBLISHER:
                    return PUBLISHER
                if held.upstream == GONE:
                    return None
                if not self._holds(held.upstream, held.dataset):
                    # nothing more of it from there: stop waiting for its pieces
                    self._assembly(held.dataset).forget(held.upstream)
                return held.upstream
        return PUBLISHER

    def _owner(
        self,
        dataset: str,
        view: View,
        members: ResponsibilityMap,
        reachable: Callable[[str], bool],
    ) -> str:
        if dataset not in self._keys or isinstance(view, Entity):
            return PUBLISHER
        if not members.members:
            return PUBLISHER
        owner = members.owner_of(dataset, view)
        if owner.name <= self._me or not reachable(owner.name):
            return PUBLISHER  # ours, or forwarding there could close a circle (rule 1)
        return owner.name

    def _released(self, held: Held) -> None:
        """A primitive acquired for a relay below is released: its view may be forwarded
        again once no primitive of it is held."""
        if (held.dataset, held.view) in self._for_below and not any(
            (h.dataset, h.view) == (held.dataset, held.view) for h in self.held.values()
        ):
            del self._for_below[held.dataset, held.view]

    def _holds(self, upstream: str, dataset: str) -> bool:
        return any(h.upstream == upstream and h.dataset == dataset for h in self.held.values())

    def _assembly(self, dataset: str) -> Assembly[Batch]:
        assembly = self._assemblies.get(dataset)
        if assembly is None:
            assembly = self._assemblies[dataset] = Assembly()
            assembly.expect(PUBLISHER)
        return assembly

    def on_batch(self, upstream: str, batch: Batch) -> Taken:
        """A piece from ``upstream`` (rule 2)."""
        assembly = self._assembly(batch.dataset)
        outcome = assembly.add(
            upstream, (batch.epoch, batch.seq), batch, snapshots=bool(batch.snapshots)
        )
        taken = Taken(self._merged(batch.dataset, outcome.assembled), [], {})
        for piece in outcome.stale:
            for prim in piece.snapshots:
                held = self.held.get(prim)
                if held is not None and held.upstream == upstream != PUBLISHER:
                    taken.sends.append((upstream, Release(prim)))
                    taken.sends.append((upstream, Acquire(prim, held.dataset, held.view)))
        return taken

    def resynced(self, upstream: str, resync: Resync) -> None:
        """Relay ``upstream`` lacks the changes inside ``resync.prims`` until it sends their
        snapshots again: those of its pieces still waiting here do not make them ready."""
        prims = set(resync.prims)

        def without(piece: Batch) -> Batch:
            if prims.isdisjoint(piece.snapshots):
                return piece
            return replace(piece, snapshots=[p for p in piece.snapshots if p not in prims])

        self._assembly(resync.dataset).rewrite(upstream, without)

    def lost(self, upstream: str) -> Taken:
        """Peer ``upstream`` is lost (rule 3): the seqs that waited for it, and the primitives
        held from it to acquire anew (the core releases them, which goes nowhere, and acquires
        them again, routed anew)."""
        taken = Taken([], [], {})
        for dataset, assembly in self._assemblies.items():
            taken.batches += self._merged(dataset, assembly.forget(upstream).assembled)
        for prim, held in list(self.held.items()):
            if held.upstream == upstream:
                self.held[prim] = Held(GONE, held.dataset, held.view)
                taken.resync.setdefault(held.dataset, set()).add(prim)
        return taken

    def reset(self) -> None:
        """The publisher is lost: the core acquires everything anew when it is back."""
        self.held.clear()
        self._for_below.clear()
        self._assemblies.clear()
        for name in self._keys:
            self._assembly(name)

    def _merged(self, dataset: str, assembled: list[Assembled[Batch]]) -> list[Batch]:
        out = []
        for seq in assembled:
            if len(seq.pieces) > 1:
                self.assembled += 1
            out.append(merge_pieces(seq.pieces, self._keys[dataset]))
        return out

    def stats(self) -> dict[str, int]:
        """Counts for ``GET /metrics``."""
        return {
            "forwarded_primitives": sum(
                h.upstream not in (PUBLISHER, GONE) for h in self.held.values()
            ),
            "forwarded": self.forwarded,
            "assembled": self.assembled,
        }


def routing_map(known: ResponsibilityMap, me: str, owning: bool) -> ResponsibilityMap:
    """The map relay ``me`` routes by (rule 4): the map ``known`` as last read while it owns
    its parts, else that map without ``me`` (its lease lapsed, or it waits to serve again)."""
    if owning:
        return known
    return known.with_members({n: url for n, url in known.members.items() if n != me})


def acquired_anew(
    held: Mapping[int, Held],
    before: ResponsibilityMap,
    after: ResponsibilityMap,
    me: str,
    linked: Callable[[str], bool],
) -> dict[str, set[int]]:
    """The primitives relay ``me`` acquires anew, per dataset, when the map it routes by
    changes from ``before`` to ``after`` (rule 4): one held from the publisher whose part was
    ``me``'s and is another relay's now (a split, a merge, a relay joining, its own lease
    lapsing), and one held from a ``linked`` relay no longer responsible for it. The others
    stay where they are: their rows never stop.

    Args:
        held: where each primitive was acquired (``Upstreams.held``), by id.
        before: the map routed by until now (:func:`routing_map`).
        after: the map routed by from now.
        me: this relay's name.
        linked: whether a peer link to a relay is open (a lost one is rule 3's).
    """
    anew: dict[str, set[int]] = {}
    for prim, primitive in held.items():
        dataset, view, upstream = primitive.dataset, primitive.view, primitive.upstream
        if upstream == PUBLISHER:
            part = part_of(dataset, view, after.side)
            moved = _owner(before, part) == me and _owner(after, part) not in (me, None)
        else:
            moved = (
                upstream != GONE
                and linked(upstream)
                and (not after.members or after.owner_of(dataset, view).name != upstream)
            )
        if moved:
            anew.setdefault(dataset, set()).add(prim)
    return anew


def _owner(members: ResponsibilityMap, part: str) -> str | None:
    return members.owner(part).name if members.members else None
