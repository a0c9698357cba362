"""Which generations of a leader's shared state its workers may still read, sans I/O
(``relay.shell.sharedstate`` writes them; ``tiers.below`` tells the workers).

A worker is told generations in increasing order and says which one it adopted (``Adopted``)
once it reads nothing older. So a worker may read any generation from the last it adopted to
the last it was told: those are **in use**, and the leader writes over none of them. A worker
that lags (told ``LAG`` generations past the one it adopted) is told no newer one until it
adopts, so one stuck worker holds at most ``LAG + 1`` generations, never the whole ring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fanout.relay.core.sends import Send
from fanout.relay.data import layout
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.data.intake import DatasetState
from fanout.tiers.held import Below, Held
from fanout.wire.columns import Columns
from fanout.wire.messages import Adopted, Batch, SharedRef

#: Generations told past the one adopted, at most (see the module docstring).
LAG = 3


@dataclass
class Holdings:
    """Per worker (by name) and dataset: [the generation adopted, the last one told]."""

    lag: int = LAG
    _held: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def may_tell(self, worker: str, dataset: str, generation: int) -> bool:
        """Whether ``worker`` may be told ``generation`` now (it does not lag)."""
        held = self._held.get(worker, {}).get(dataset)
        return held is None or generation - held[0] <= self.lag

    def told(self, worker: str, dataset: str, generation: int) -> None:
        """``worker`` was told ``generation`` of ``dataset`` (the first: as if adopted)."""
        held = self._held.setdefault(worker, {}).setdefault(dataset, [generation, generation])
        held[1] = max(held[1], generation)

    def adopted(self, worker: str, dataset: str, generation: int) -> None:
        """``worker`` reads ``generation`` and no older one (a lower one than before: ignored)."""
        held = self._held.get(worker, {}).get(dataset)
        if held is not None:
            held[0] = max(held[0], min(generation, held[1]))

    def forget(self, worker: str) -> None:
        """``worker``'s process ended: it reads nothing."""
        self._held.pop(worker, None)

    def in_use(self, dataset: str, generation: int) -> bool:
        """Whether some worker may read ``generation`` of ``dataset``."""
        return any(
            held[0] <= generation <= held[1]
            for datasets in self._held.values()
            if (held := datasets.get(dataset)) is not None
        )


#: What a worker lists in its ``Hello.capabilities`` to be told its leader's state in shared
#: memory (``Batch.shared``) instead of rows.
SHARED_STATE = "shared-state"


class Publishing(Protocol):
    """Where a leader writes its state for its workers (``relay.shell.sharedstate``)."""

    holdings: Holdings

    def publish(self, dataset: str, buffer: DoubleBuffer) -> SharedRef | None:
        """Where ``buffer``'s active state lies in shared memory (None: it is not shared)."""
        ...


def notice(dataset: str, stamp: Stamp, ref: SharedRef, snapshots: Sequence[int] = ()) -> Batch:
    """The batch that tells a worker the state at ``stamp`` is ``ref`` (the primitives of
    ``snapshots`` whole in it)."""
    empty = Columns()
    return Batch(
        dataset,
        stamp.epoch,
        stamp.seq,
        stamp.tick,
        stamp.tick_time,
        upserts=empty,
        deletes=empty,
        snapshots=list(snapshots),
        shared=ref,
    )


def shares(state: DatasetState) -> bool:
    """Whether ``state`` is told in shared memory to the workers that read it (a space index
    over fixed-width columns: ``relay.shell.sharedstate``)."""
    return bool(state.buffer.coordinates) and layout.shareable(state.buffer.active)


@dataclass
class Adopting:
    """A worker's side: the generations it swapped in, to tell its leader (``Adopted``)."""

    told: dict[str, int] = field(default_factory=dict)

    def adopted(self, states: Mapping[str, DatasetState]) -> list[Adopted]:
        """``Adopted`` for each dataset whose active state is a newer shared generation."""
        frames = []
        for name, state in states.items():
            generation = state.buffer.shared
            if generation >= 0 and generation != self.told.get(name):
                self.told[name] = generation
                frames.append(Adopted(name, generation))
        return frames


def sharing(state: DatasetState, belows: Sequence[Below]) -> list[Below]:
    """The relays below told ``state`` in shared memory: the workers, if it is shared."""
    return [below for below in belows if below.shared] if shares(state) else []


def share(
    publishing: Publishing, datasets: Mapping[str, DatasetState], belows: Sequence[Below]
) -> list[Send]:
    """Each shared dataset's new active state, told to the workers (not lagging) that have
    not been told it: the whole state, in place of its batch cut to them."""
    sends: list[Send] = []
    for name, state in datasets.items():
        stamp, readers = state.buffer.stamp, sharing(state, belows)
        if state.busy or stamp is None or not readers:
            continue
        ref = publishing.publish(name, state.buffer)
        if ref is None:
            continue
        for below in readers:
            if below.sent.get(name) == (stamp.epoch, stamp.seq):
                continue
            if publishing.holdings.may_tell(below.name, name, ref.generation):
                publishing.holdings.told(below.name, name, ref.generation)
                below.sent[name] = (stamp.epoch, stamp.seq)
                sends.append(Send(below.client, notice(name, stamp, ref)))
    return sends


def snapshot(
    publishing: Publishing, below: Below, dataset: str, state: DatasetState, ready: list[Held]
) -> list[Send]:
    """The ``ready`` primitives of a worker, told as whole in the shared state now (none: it
    cannot be told now; they wait)."""
    ref = publishing.publish(dataset, state.buffer) if ready else None
    stamp = state.buffer.stamp
    if ref is None or stamp is None:
        return []
    if not publishing.holdings.may_tell(below.name, dataset, ref.generation):
        return []
    publishing.holdings.told(below.name, dataset, ref.generation)
    for held in ready:
        held.live = True
    below.sent[dataset] = (stamp.epoch, stamp.seq)
    return [Send(below.client, notice(dataset, stamp, ref, [p.prim for p in ready]))]


def adopted(publishing: Publishing, below: Below, frame: Adopted) -> list[Send]:
    """A worker adopted a generation: older ones it no longer reads."""
    publishing.holdings.adopted(below.name, frame.dataset, frame.generation)
    return []
