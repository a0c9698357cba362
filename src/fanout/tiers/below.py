"""The relays below a relay, sans I/O: a relay serving other relays as the publisher would
(CA 3197003 [0055]-[0057]; US 7,487,246), speaking the upstream protocol (docs/protocol.md).

1. **Catalog.** Welcomed with this relay's catalog (``unavailable`` while it has none); a
   ``resume`` answered ``resync`` (this window holds only what this relay's coverage saw).
2. **Acquire.** Pinned here, what is not covered acquired upstream; its snapshot goes down,
   stamped with the last seq forwarded, once ready primitives cover it; refused: ``invalid_view``.
3. **Batches.** Each goes below once decoded (with snapshots: once written), before its swap,
   cut to each relay's live primitives (``tiers.cut``); ``Written`` to those it concerns.
4. **Curiosity.** Answered from the window for the seqs whole there, the rest passed up merged
   with others': each seq asked once while in flight (``tiers.curiosity``).
5. **Upward.** Horizons and live writes wanted, this relay's and the relays' below combined.
6. **Losing upstream**: the relays below are dropped, to connect again; **losing coverage**
   (``resync``, ``Resync``): what is no longer covered ready waits for snapshots (rule 2).
Kinds differ by their answers alone (``primitive``, ``holds``, ``contents``). See docs/cluster.md.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Collection

import msgspec

from fanout.errors import InvalidView
from fanout.relay.core.changesets import ChangeSet
from fanout.relay.core.relaycore import RelayCore
from fanout.relay.core.sends import UPSTREAM, Send
from fanout.relay.data.intake import DatasetState as HeldState
from fanout.relay.data.intake import Intake, decode_rows
from fanout.relay.data.nulls import masked
from fanout.tiers import cut, shared
from fanout.tiers.curiosity import Curiosity
from fanout.tiers.held import Below, Held
from fanout.tiers.shared import Adopting, Publishing
from fanout.tiers.upward import Upward
from fanout.wire.columns import Columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Adopted,
    Batch,
    Catalog,
    Curious,
    DatasetState,
    Error,
    Frame,
    Hello,
    Horizon,
    Knowledge,
    LiveWrites,
    Pending,
    Release,
    Resync,
    Written,
)

#: Request numbers this relay gives the curiosity it passes upstream (its own ``every`` mode
#: numbers from 2**40: ``relay.core.every.FIRST_CURIOSITY``).
FIRST_PASSED = 1 << 50
#: Seqs one ``Curious`` may ask for (the publisher's ``MAX_CURIOSITY``).
MAX_ASKED = 10_000


class Relays:
    """The relays below one relay, around its ``RelayCore``.

    It stands in for the core where batches are written (``relay.shell.writer.Core``: ``admit``,
    ``finish``, ``end_epoch``; and the writer's ``decoded``) and where housekeeping runs, so
    that each batch is forwarded once decoded (or written) and each snapshot as soon as it can
    be cut.

    Attributes:
        forwarded: batches sent to relays below; snapshots: primitives below made live;
        asked: curiosity requests from relays below; passed: requests passed upstream for
        them, and passed_seqs their seqs; merged: asks needing no new request (their seqs
        already asked); answered: answered from the window; resyncs_sent, resyncs_taken:
        ``Resync`` frames sent below and taken from upstream.
    """

    def __init__(self, core: RelayCore, max_primitives: int = 10_000) -> None:
        """
        Args:
            core: the relay's core.
            max_primitives: primitives one relay below may hold here at once; an ``Acquire``
                beyond them is refused (``bad_request``).
        """
        self.core = core
        self.max_primitives = max_primitives
        self.below: dict[int, Below] = {}
        self.curiosity = Curiosity(FIRST_PASSED)
        self.upward = Upward()  # what went upstream
        #: Datasets whose query the upstream said stopped (``DatasetState``), by name.
        self.stopped: dict[str, DatasetState] = {}
        #: A leader's shared memory, where its workers read its state (``tiers.shared``).
        self.shared: Publishing | None = None
        #: A worker's generations of its leader's shared state, told it (``Adopted``).
        self.adopting = Adopting()
        self.forwarded = self.snapshots = self.asked = self.passed = self.passed_seqs = 0
        self.merged = self.answered = self.resyncs_sent = self.resyncs_taken = 0

    # -- the writer's side (relay.writer.Core) ---------------------------------------------

    def admit(self, batch: Batch) -> Intake | None:
        """``RelayCore.admit``."""
        return self.core.admit(batch)

    def decoded(self, intake: Intake) -> list[Send]:
        """A batch decoded, not yet written here: a pure one (no snapshots, so its cut reads
        nothing of this relay's state) goes to every relay below at once (rule 3): this
        relay's write is on no path below (a leader's workers, a mid relay's edges)."""
        if intake.snapshots or intake.forwarded:
            return []
        return self._forward(intake)

    def finish(self, intake: Intake) -> list[Send]:
        """``RelayCore.finish``, then the batch forwarded to every relay below unless it went
        when decoded (rule 3)."""
        sends = self.core.finish(intake)
        return sends if intake.forwarded else sends + self._forward(intake)

    def end_epoch(self) -> list[Send]:
        """``RelayCore.end_epoch``, then the state told to workers in shared memory, the
        snapshots that can go down now (rule 2), and (a worker) the generations adopted."""
        return self.core.end_epoch() + self._share() + self.ready() + self._adopted()

    def _share(self) -> list[Send]:
        below = list(self.below.values())
        return [] if self.shared is None else shared.share(self.shared, self.core.datasets, below)

    def _sharing(self, state: HeldState) -> list[Below]:
        below = list(self.below.values())
        return [] if self.shared is None else shared.sharing(state, below)

    def _adopted(self) -> list[Send]:
        return [Send(UPSTREAM, f) for f in self.adopting.adopted(self.core.datasets)]

    def housekeeping(self, now: float) -> list[Send]:
        """``RelayCore.housekeeping``, its horizons combined with those below (rule 5); and
        snapshots that can go down."""
        sends: list[Send] = []
        for send in self.core.housekeeping(now):
            if send.to == UPSTREAM and isinstance(send.frame, Horizon):
                self.upward.own[send.frame.dataset] = (send.frame.epoch, send.frame.seq)
            else:
                sends.append(send)
        epochs = {name: state.epoch for name, state in self.core.datasets.items()}
        horizons = self.upward.horizons(epochs, [below.horizons for below in self.below.values()])
        return sends + horizons + self.live_writes() + self._share() + self.ready()

    # -- connections -----------------------------------------------------------------------

    def welcome(self, client: int, hello: Hello) -> list[Send] | Error:
        """A relay below was welcomed: its catalog (and a ``resync`` for its resume), or the
        refusal to close it with when this relay has no catalog yet (rule 1)."""
        if not self.core.catalogued:
            return Error(
                "unavailable", "this relay is not connected upstream yet; connect again later"
            )
        self.below[client] = Below(client, hello.name, shared=shared.welcome(self.shared, hello))
        infos = [state.info for state in self.core.datasets.values()]
        sends = [Send(client, Catalog(datasets=infos))]
        sends += [Send(client, state) for state in self.stopped.values()]
        if hello.resume:
            message = (
                "a relay replays no seqs to the relays below it; resync from snapshots (seqs an"
                " every-mode stream lacks are asked for with curious)"
            )
            sends.append(Send(client, Error("resync", message)))
        return sends

    def gone(self, client: int) -> None:
        """A relay below went away: its primitives are unpinned (released here later)."""
        below = self.below.pop(client, None)
        for held in () if below is None else below.prims.values():
            self.core.downstream.unpin(held.dataset, held.view)
        self.curiosity.gone(client)
        self._reading()

    def _reading(self) -> None:
        """Tell the core which datasets relays below read in ``every`` mode: those of their
        horizons and of their asks still waiting (an ask may come before its horizon)."""
        datasets = {stream[0] for stream in self.curiosity.streams()}
        for below in self.below.values():
            datasets |= below.reads()
        self.core.every.read_below(frozenset(datasets))

    def on_dataset_state(self, state: DatasetState) -> list[Send]:
        """The upstream's dataset stopped or runs again: remembered (a relay below connecting
        meanwhile is told) and passed to every relay below."""
        if state.running:
            self.stopped.pop(state.dataset, None)
        else:
            self.stopped[state.dataset] = state
        return [Send(below.client, state) for below in self.below.values()]

    def on_written(self, frame: Written | Pending) -> list[Send]:
        """A write made elsewhere (or a leader's ``Pending``), passed down to the relays below
        it concerns (rule 3, ``DatasetKind.reach``). Raises ProtocolError: not whole rows."""
        state = self.core.datasets.get(frame.dataset)
        if not self.below or state is None:
            return []
        kind, deletes = self.core.parts.kinds[frame.dataset], frame.deletes.length > 0
        named = decode_rows(state.info, frame.upserts, type(frame).__name__.lower())
        rows = kind.reach(named)
        wanting = {c: b for c, b in self.below.items() if frame.dataset in b.live_writes}
        views = {c: [p.view for p in b.live(frame.dataset)] for c, b in wanting.items()}
        return [
            Send(client, frame)
            for client, held in views.items()
            if held and (deletes or (rows and kind.holds(held, rows).any()))
        ]

    def upstream_lost(self) -> list[int]:
        """This relay lost its upstream: the relays below to drop (rule 6)."""
        self.upward.lost()
        self.stopped.clear()  # the next upstream says again what is stopped
        self.curiosity.clear()
        return list(self.below)

    def on_frame(self, client: int, frame: Frame) -> list[Send]:
        """A frame from a relay below."""
        below = self.below[client]
        match frame:
            case Acquire() as acquire:
                return self._acquire(below, acquire)
            case Release(prim=prim):
                return self._release(below, prim)
            case Curious() as curious:
                sends = self._curious(below, curious)
                self._reading()
                return sends
            case Horizon() | LiveWrites():
                below.told(frame)
                self._reading()
                return self.live_writes()
            case Adopted() if below.shared and self.shared is not None:
                return shared.adopted(self.shared, below, frame)
        name = type(frame).__name__.lower()
        return [Send(client, Error("protocol", f"a relay does not take {name} from a relay"))]

    # -- acquiring -------------------------------------------------------------------------

    def _release(self, below: Below, prim: int) -> list[Send]:
        held = below.prims.pop(prim, None)
        if held is None:
            message = f"release of primitive {prim}, which is not held"
            return [Send(below.client, Error("primitive", message, ref=prim))]
        self.core.downstream.unpin(held.dataset, held.view)
        return []

    def _acquire(self, below: Below, acquire: Acquire) -> list[Send]:
        client, prim = below.client, acquire.prim
        if prim in below.prims:
            return [Send(client, Error("primitive", f"primitive {prim} is held", ref=prim))]
        if len(below.prims) >= self.max_primitives:
            message = f"a relay below may hold {self.max_primitives} primitives here at most"
            return [Send(client, Error("bad_request", message, ref=prim))]
        kind = self.core.parts.kinds.get(acquire.dataset)
        if kind is None:
            known = ", ".join(self.core.datasets)
            message = f"unknown dataset {acquire.dataset!r} (known: {known})"
            return [Send(client, Error("invalid_view", message, ref=prim))]
        try:
            view = kind.primitive(acquire.view)
        except InvalidView as exc:
            return [Send(client, Error("invalid_view", str(exc), ref=prim))]
        below.prims[prim] = Held(prim, acquire.dataset, view)
        self.core.downstream.pin(acquire.dataset, view)
        added = kind.acquire(view, None, True)
        sends = [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in added]
        return sends + self.ready()

    def ready(self) -> list[Send]:
        """Snapshots of the primitives below that this relay's ready coverage now holds,
        stamped with its active state's seq, once that is the last seq forwarded (rule 2)."""
        sends: list[Send] = []
        for below in self.below.values():
            waiting: dict[str, list[Held]] = {}
            for held in below.prims.values():
                if not held.live:
                    waiting.setdefault(held.dataset, []).append(held)
            for dataset, prims in waiting.items():
                sends += self._snapshot(below, dataset, prims)
        return sends

    def _snapshot(self, below: Below, dataset: str, prims: list[Held]) -> list[Send]:
        state, kind = self.core.datasets[dataset], self.core.parts.kinds[dataset]
        stamp = state.buffer.stamp
        if state.busy or stamp is None or (stamp.epoch, stamp.seq) != (state.epoch, state.seq):
            return []  # a batch is written but not swapped in: after it is
        if below in self._sharing(state):
            assert self.shared is not None
            ready = [p for p in prims if kind.covered(p.view, ready_only=True)]
            sends = shared.snapshot(self.shared, below, dataset, state, ready)
            self.snapshots += len(ready) if sends else 0
            return sends
        sent = below.sent.get(dataset)
        if sent is not None and sent != (stamp.epoch, stamp.seq):
            return []
        ready = [p for p in prims if kind.covered(p.view, ready_only=True)]
        if not ready:
            return []
        info = state.info
        content = kind.contents([p.view for p in ready])
        for held in ready:
            held.live = True
        before = below.checkout.get(dataset, state.table.as_keys([]))
        below.checkout[dataset] = cut.union(before, content[info.key])
        below.sent[dataset] = (stamp.epoch, stamp.seq)
        self.snapshots += len(ready)
        batch = Batch(
            dataset,
            stamp.epoch,
            stamp.seq,
            stamp.tick,
            stamp.tick_time,
            upserts=encode_columns(masked(content)),
            deletes=Columns(),
            snapshots=[p.prim for p in ready],
        )
        return [Send(below.client, batch)]

    # -- forwarding ------------------------------------------------------------------------

    def _forward(self, intake: Intake) -> list[Send]:
        if not self.below or intake.deletes is None:
            return []
        intake.forwarded = True
        batch, state = intake.batch, intake.state
        sharing = self._sharing(state)  # told the whole state once swapped in (``_share``)
        receiving = [below for below in self.below.values() if below not in sharing]
        if not receiving:
            return []
        info, kind = state.info, self.core.parts.kinds[batch.dataset]
        deleted = intake.deletes
        change = ChangeSet(
            batch.epoch, batch.seq, batch.tick, batch.tick_time, intake.upserts, deleted
        )
        refreshed = cut.refreshed(intake, kind)
        sends: list[Send] = []
        holds = kind.holder(change.rows)  # the rows prepared once for every relay below
        for below in receiving:
            sent = below.sent.get(batch.dataset)
            if sent is not None and sent[0] == batch.epoch and batch.seq <= sent[1]:
                continue  # a re-send here (our own snapshots): nothing new below
            live = below.live(batch.dataset)
            held = below.checkout.get(batch.dataset, deleted[:0])
            inside = holds([p.view for p in live])
            found = cut.step(change, inside, held, key=info.key)
            touched = [p for p in live if refreshed and kind.holds([p.view], refreshed).any()]
            if touched:  # rows of our snapshots among the changes: send those prims whole
                content = kind.contents([p.view for p in touched], state.buffer.inert)
                found = cut.merge(found, content, info.key)
            below.checkout[batch.dataset] = found.held
            below.sent[batch.dataset] = (batch.epoch, batch.seq)
            self.forwarded += 1
            sends.append(
                Send(
                    below.client,
                    Batch(
                        batch.dataset,
                        batch.epoch,
                        batch.seq,
                        batch.tick,
                        batch.tick_time,
                        upserts=encode_columns(masked(found.upserts)),
                        deletes=encode_columns({info.key: found.deletes}),
                        snapshots=[p.prim for p in touched],
                    ),
                )
            )
        return sends

    # -- curiosity and knowledge -----------------------------------------------------------

    def _curious(self, below: Below, curious: Curious) -> list[Send]:
        self.asked += 1
        history = self.core.histories.get(curious.dataset)
        if history is None:
            message = f"unknown dataset {curious.dataset!r}"
            return [Send(below.client, Error("invalid_view", message, ref=curious.req))]
        seqs = range(curious.first, curious.last + 1)
        known = (
            [history.get(seq, sys.maxsize) for seq in seqs]
            if curious.epoch == history.epoch and 0 < len(seqs) <= MAX_ASKED
            else [None]
        )
        if all(change is not None and change.whole for change in known):
            self.answered += 1
            return [
                Send(below.client, cut.knowledge(curious.req, curious.dataset, change, self.core))
                for change in known
                if change is not None
            ]
        if not 0 < len(seqs) <= MAX_ASKED:
            message = f"curiosity about seqs {curious.first}..{curious.last}: ask for 1 to"
            message += f" {MAX_ASKED} seqs"
            return [Send(below.client, Error("bad_request", message, ref=curious.req))]
        # Seqs the window holds whole are answered from here (an answer to an earlier flight
        # may have landed some of them); upstream is asked only for the rest.
        held = [change for change in known if change is not None and change.whole]
        asker = (below.client, curious.req)
        requests = self.curiosity.ask(
            asker,
            curious.dataset,
            curious.epoch,
            curious.first,
            curious.last,
            held=frozenset(change.seq for change in held),
        )
        self.passed += len(requests)
        self.passed_seqs += sum(r.last - r.first + 1 for r in requests)
        self.merged += not requests
        return [
            Send(below.client, cut.knowledge(curious.req, curious.dataset, change, self.core))
            for change in held
        ] + [Send(UPSTREAM, Curious(r.req, r.dataset, r.epoch, r.first, r.last)) for r in requests]

    def on_knowledge(self, knowledge: Knowledge) -> tuple[bool, list[Send]]:
        """Knowledge from upstream: kept in the window, and sent to every relay below waiting
        for that seq (``tiers.curiosity``). Returns whether a subscription here was waiting
        for it, and the sends. Raises ProtocolError as ``RelayCore.on_knowledge``."""
        waiting = self.core.on_knowledge(knowledge)
        askers = self.curiosity.answer(knowledge.req, knowledge.seq)
        replace = msgspec.structs.replace
        return waiting, [Send(client, replace(knowledge, req=req)) for client, req in askers]

    def resync(self, dataset: str, prims: Collection[int] | None = None) -> list[Send]:
        """``RelayCore.resync``; each relay below told what waits for snapshots (``Resync``)."""
        return self.core.resync(dataset, prims) + self._unready_below(dataset)

    def on_resync(self, resync: Resync) -> list[Send]:
        """The upstream's batches lack the changes inside some primitives until it sends their
        snapshots again (``RelayCore.unready``): so will this relay's to the relays below."""
        self.core.unready(resync.dataset, resync.prims)
        self.resyncs_taken += 1
        return self._unready_below(resync.dataset)

    def _unready_below(self, dataset: str) -> list[Send]:
        if (kind := self.core.parts.kinds.get(dataset)) is None:
            return []  # a dataset not held here (a ``Resync`` of one): nothing below holds it
        covered = functools.partial(kind.covered, ready_only=True)
        told = ((below, below.unready(dataset, covered)) for below in self.below.values())
        sends = [Send(below.client, resync) for below, resync in told if resync is not None]
        self.resyncs_sent += len(sends)
        return sends

    def on_upstream_error(self, error: Error) -> list[Send] | None:
        """An error from upstream about a request passed on: sent to the relay below that
        asked (None: not one of ours)."""
        failed = None if error.ref is None else self.curiosity.refused(error.ref)
        if failed is None:
            return None
        return [Send(client, Error(error.code, error.message, ref=req)) for client, req in failed]

    def uncovered(self) -> list[Send]:
        """After upstream refused primitives: the primitives below that nothing held here
        covers any more are refused to their relays."""
        sends: list[Send] = []
        for below in self.below.values():
            for held in list(below.prims.values()):
                kind = self.core.parts.kinds.get(held.dataset)
                if kind is not None and kind.covered(held.view, ready_only=False):
                    continue
                del below.prims[held.prim]
                self.core.downstream.unpin(held.dataset, held.view)
                message = "upstream refused data this primitive needs"
                sends.append(Send(below.client, Error("invalid_view", message, ref=held.prim)))
        return sends

    # -- what goes upstream (``tiers.upward``) ------------------------------------------------

    def live_writes(self, subscribed: tuple[int, int] | None = None) -> list[Send]:
        """The datasets whose live writes are wanted here or below, told upstream: all, or only
        the dataset of ``subscribed`` (just made) if it takes them, at once, before its first
        push (a dataset no longer wanted is told at housekeeping)."""
        if not self.core.catalogued:  # told once connected (nothing goes upstream meanwhile)
            return []
        wanted = self.core.serving.live.wanted(subscribed)
        for below in self.below.values() if subscribed is None else ():
            wanted |= below.live_writes
        return self.upward.live_writes(wanted, adding=subscribed is not None)

    def stats(self) -> dict[str, float]:
        """Counters of the relays below, for ``/metrics`` and logs."""
        return {
            "relays_below": len(self.below),
            "below_primitives": sum(len(b.prims) for b in self.below.values()),
            "below_batches": self.forwarded,
            "below_snapshots": self.snapshots,
            "below_curiosity_asked": self.asked,
            "below_curiosity_passed": self.passed,
            "below_curiosity_passed_seqs": self.passed_seqs,
            "below_curiosity_merged": self.merged,
            "below_curiosity_answered": self.answered,
            "below_resyncs": self.resyncs_sent,
            "resyncs_taken": self.resyncs_taken,
            "upstream_datasets_stopped": len(self.stopped),
        }
