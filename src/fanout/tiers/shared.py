"""Which generations of a leader's shared state its workers may still read, sans I/O
(``relay.shell.sharedstate`` writes them; ``tiers.below`` tells the workers).

A worker is told generations in increasing order and says which one it adopted (``Adopted``)
once it reads nothing older. So a worker may read each generation it was told from the last it
adopted on: those are **in use**, and the leader writes over none of them. A worker holding
``LAG + 1`` of them is told no newer one until it adopts, so one stuck worker holds at most
``LAG + 1`` generations, never the whole ring; once it adopts, it is told the latest again, as
it is once after connecting again (what was told on the lost connection stays in use).
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
from fanout.wire.messages import Adopted, Batch, Hello, SharedRef

#: Generations a worker may hold in use besides the one it adopted (see the module docstring).
LAG = 3


@dataclass
class Holdings:
    """Per worker (by name) and dataset: the generations it was told from the one it adopted
    on, oldest first."""

    lag: int = LAG
    _held: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    _connected: set[tuple[str, str]] = field(default_factory=set)  # not told since connecting

    def may_tell(self, worker: str, dataset: str, generation: int) -> bool:
        """Whether ``worker`` may be told ``generation`` now (it does not lag, or it has just
        connected again: what it was told before is lost)."""
        held = self._held.get(worker, {}).get(dataset, [])
        fresh = (worker, dataset) in self._connected
        return fresh or generation in held or len(held) <= self.lag

    def told(self, worker: str, dataset: str, generation: int) -> None:
        """``worker`` was told ``generation`` of ``dataset``."""
        self._connected.discard((worker, dataset))
        held = self._held.setdefault(worker, {}).setdefault(dataset, [])
        if not held or generation > held[-1]:
            held.append(generation)

    def connected(self, worker: str) -> None:
        """``worker`` connected (again): it may be told one generation of each dataset."""
        self._connected |= {(worker, dataset) for dataset in self._held.get(worker, {})}

    def adopted(self, worker: str, dataset: str, generation: int) -> None:
        """``worker`` reads ``generation`` and none older (older than before: ignored)."""
        held = self._held.get(worker, {}).get(dataset)
        if held is not None:
            held[:] = [told for told in held if told >= generation]

    def forget(self, worker: str) -> None:
        """``worker``'s process ended: it reads nothing."""
        self._held.pop(worker, None)
        self._connected = {(name, dataset) for name, dataset in self._connected if name != worker}

    def in_use(self, dataset: str, generation: int) -> bool:
        """Whether some worker may read ``generation`` of ``dataset``."""
        return any(generation in datasets.get(dataset, ()) for datasets in self._held.values())


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


def welcome(publishing: Publishing | None, hello: Hello) -> bool:
    """Whether the relay below saying ``hello`` is told the state in shared memory (a worker
    declaring ``SHARED_STATE`` to a leader that writes it); it is then (again) connected."""
    if publishing is None or SHARED_STATE not in hello.capabilities:
        return False
    publishing.holdings.connected(hello.name)
    return True


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
