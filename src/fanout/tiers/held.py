"""What a relay knows of each relay below it (``tiers.below``): its primitives, what was sent
to it, and what it told (horizons, live writes wanted)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fanout.relay.data.buffers import Keys
from fanout.views import View
from fanout.wire.messages import Horizon, LiveWrites, Resync


@dataclass
class Held:
    """One primitive of a relay below.

    Attributes:
        prim: its id, chosen by the relay below.
        dataset: the dataset it selects from.
        view: what it selects, as this relay holds it (``DatasetKind.primitive``).
        live: its snapshot went down: batches carry every change inside it.
    """

    prim: int
    dataset: str
    view: View
    live: bool = False


@dataclass
class Below:
    """One relay below.

    Attributes:
        client: its connection.
        name: the name in its ``Hello``.
        prims: its primitives, by its ids.
        checkout: per dataset, the sorted keys sent to it and not deleted since.
        sent: per dataset, the (epoch, seq) of the last batch sent.
        horizons: per dataset, the (epoch, seq) of its last ``Horizon``.
        live_writes: the datasets whose writes made elsewhere it wants (``LiveWrites``).
        shared: a worker of this relay, told the state in shared memory (``tiers.shared``).
    """

    client: int
    name: str
    prims: dict[int, Held] = field(default_factory=dict)
    checkout: dict[str, Keys] = field(default_factory=dict)
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)
    horizons: dict[str, tuple[int, int]] = field(default_factory=dict)
    live_writes: set[str] = field(default_factory=set)
    shared: bool = False

    def told(self, frame: Horizon | LiveWrites) -> None:
        """It told its horizon of a dataset, or whether it wants the dataset's live writes."""
        if isinstance(frame, Horizon):
            self.horizons[frame.dataset] = (frame.epoch, frame.seq)
        else:
            (self.live_writes.add if frame.wanted else self.live_writes.discard)(frame.dataset)

    def live(self, dataset: str) -> list[Held]:
        """Its live primitives of ``dataset``."""
        return [p for p in self.prims.values() if p.dataset == dataset and p.live]

    def unready(self, dataset: str, covered: Callable[[View], bool]) -> Resync | None:
        """Its live primitives of ``dataset`` that are not ``covered`` (by ready primitives
        here) wait for their snapshots again (``tiers.below`` rule 2): what to tell it, if any
        (``Resync``)."""
        lost = [held for held in self.live(dataset) if not covered(held.view)]
        for held in lost:
            held.live = False
        return Resync(dataset, [held.prim for held in lost]) if lost else None

    def reads(self) -> set[str]:
        """The datasets it reads in ``every`` mode: those whose horizon it told and did not
        withdraw (``Horizon`` with seq -1)."""
        return {name for name, (_, seq) in self.horizons.items() if seq >= 0}
