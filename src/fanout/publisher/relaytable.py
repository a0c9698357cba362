"""The publisher's table of relays and the upstream primitives each holds (CA 3197003 [0133],
[0135]).

It is shared by two threads: the control plane's event loop (relays connect, acquire, release) and
Spark's micro-batch callback (which reads a consistent plan). Every method takes the lock; a
``Plan`` is an immutable copy, so a micro-batch works on one cut of the table however relays move
meanwhile.

Primitives acquired since the last delivered micro-batch are *fresh*: their next batch must carry
a snapshot of their content. ``plan()`` reports them and ``delivered()`` clears them, in two steps,
so a micro-batch that Spark retries after a failure snapshots them again.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from fanout.errors import FanoutError
from fanout.views import View

#: Upstream primitives one relay may hold at once (``PublisherSettings.max_primitives``). In
#: ``bench/sharing.py`` four relays held 50-510 between them for 10,000 subscribers: a relay
#: past this many is planning badly or is broken, and every primitive costs the matching.
MAX_PRIMITIVES = 100_000


class RegistryError(FanoutError, ValueError):
    """A relay asked for something inconsistent (a primitive id twice, an unknown one) or
    more than it may hold."""

    code = "primitive"


@dataclass
class _Relay:
    name: str
    prims: dict[int, tuple[str, View]] = field(default_factory=dict)
    fresh: set[int] = field(default_factory=set)
    horizons: dict[tuple[str, int], int] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Plan:
    """One consistent cut of the registry for one dataset.

    Attributes:
        version: changes whenever any relay's primitives change (for caching match tables).
        relays: every connected relay, with or without primitives of this dataset.
        prims: relay -> primitive id -> view, for this dataset.
        fresh: relay -> primitives that need a snapshot in this micro-batch.
        live: the relays that want writes to this dataset made elsewhere passed at once
            (``LiveWrites``).
    """

    version: int
    relays: frozenset[int]
    prims: dict[int, dict[int, View]]
    fresh: dict[int, frozenset[int]]
    live: frozenset[int] = frozenset()


class Registry:
    """Relays and their upstream primitives."""

    def __init__(self, max_primitives: int = MAX_PRIMITIVES) -> None:
        self.max_primitives = max_primitives
        self._lock = threading.Lock()
        self._relays: dict[int, _Relay] = {}
        self._ids = itertools.count(1)
        self._version = 0

    def add_relay(self, name: str) -> int:
        """Register a connected relay; returns its id."""
        with self._lock:
            relay = next(self._ids)
            self._relays[relay] = _Relay(name)
            self._version += 1
            return relay

    def drop_relay(self, relay: int) -> None:
        """Forget a relay and all its primitives (it disconnected)."""
        with self._lock:
            self._relays.pop(relay, None)
            self._version += 1

    def acquire(self, relay: int, prim: int, dataset: str, view: View) -> None:
        """Record that ``relay`` holds primitive ``prim``; its next batch carries a snapshot.

        Raises:
            RegistryError: the relay already holds a primitive with that id, or holds
                ``max_primitives`` already.
        """
        with self._lock:
            entry = self._relays[relay]
            if prim in entry.prims:
                raise RegistryError(f"primitive {prim} is already held by this relay")
            if len(entry.prims) >= self.max_primitives:
                raise RegistryError(
                    f"this relay holds {len(entry.prims)} primitives, the most the publisher"
                    " allows one relay (max_primitives); release some first"
                )
            entry.prims[prim] = (dataset, view)
            entry.fresh.add(prim)
            self._version += 1

    def release(self, relay: int, prim: int) -> None:
        """Forget primitive ``prim`` of ``relay``.

        Raises:
            RegistryError: the relay holds no such primitive.
        """
        with self._lock:
            entry = self._relays[relay]
            if prim not in entry.prims:
                raise RegistryError(f"primitive {prim} is not held by this relay")
            del entry.prims[prim]
            entry.fresh.discard(prim)
            self._version += 1

    def hold(self, relay: int, dataset: str, epoch: int, seq: int) -> None:
        """``relay`` still needs seqs ``seq`` onwards of (dataset, epoch); -1: none any more."""
        with self._lock:
            entry = self._relays.get(relay)
            if entry is None:
                return
            if seq < 0:
                entry.horizons.pop((dataset, epoch), None)
            else:
                entry.horizons[(dataset, epoch)] = seq

    def want_live(self, relay: int, dataset: str, wanted: bool) -> None:
        """Whether ``relay`` wants the writes to ``dataset`` made elsewhere (``LiveWrites``)."""
        with self._lock:
            entry = self._relays.get(relay)
            if entry is not None and wanted:
                entry.live.add(dataset)
            elif entry is not None:
                entry.live.discard(dataset)

    @property
    def version(self) -> int:
        """Changes whenever any relay's primitives change (``Plan.version``)."""
        with self._lock:
            return self._version

    def live(self, dataset: str) -> frozenset[int]:
        """The relays that want the writes to ``dataset`` made elsewhere (``Plan.live``)."""
        with self._lock:
            return frozenset(r for r, entry in self._relays.items() if dataset in entry.live)

    def held(self) -> dict[int, tuple[str, int]]:
        """relay -> (its name, how many primitives it holds)."""
        with self._lock:
            return {relay: (e.name, len(e.prims)) for relay, e in self._relays.items()}

    def floor(self) -> dict[tuple[str, int], int]:
        """(dataset, epoch) -> the lowest seq a connected relay still needs (the log's
        ``Retention.floor``)."""
        with self._lock:
            lowest: dict[tuple[str, int], int] = {}
            for entry in self._relays.values():
                for stream, seq in entry.horizons.items():
                    lowest[stream] = min(seq, lowest.get(stream, seq))
            return lowest

    def plan(self, dataset: str) -> Plan:
        """A consistent copy of every relay's primitives of ``dataset``."""
        with self._lock:
            prims: dict[int, dict[int, View]] = {}
            fresh: dict[int, frozenset[int]] = {}
            for relay, entry in self._relays.items():
                mine = {p: view for p, (name, view) in entry.prims.items() if name == dataset}
                prims[relay] = mine
                fresh[relay] = frozenset(p for p in entry.fresh if p in mine)
            live = frozenset(r for r, entry in self._relays.items() if dataset in entry.live)
            return Plan(self._version, frozenset(self._relays), prims, fresh, live)

    def delivered(self, plan: Plan) -> None:
        """The micro-batch built from ``plan`` was handed over: its snapshots are no longer due."""
        with self._lock:
            for relay, done in plan.fresh.items():
                entry = self._relays.get(relay)
                if entry is not None:
                    entry.fresh -= done
