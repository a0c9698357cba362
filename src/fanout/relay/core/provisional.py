"""Live writes on a relay, pure: rows in, patches out (docs/concepts.md, "Two paths"). Rules:

1. A write (keyed rows; None deletes) is shown at once to each watcher (a ``latest``
   subscription taking live writes) whose view it changes, as a provisional patch.
2. Pending until settled: *confirmed* by an active state with ``tick >= last`` once accepted
   at ingest offset ``last``; *refused*; *withdrawn* past its deadline or when the link is lost
   before it was accepted (an accepted one's deadline waits until a new link's first state).
3. A subscriber holds what the push machinery believes, changed at the keys of its ``shown``.
4. Never twice: a confirmed push leaves out rows held already (``deduplicated``), shows pending
   rows, and confirmed ones where a write settled otherwise.
5. A write settled: a watcher shown its keys gets what they are now if it differs (``corrected``,
   provisional if another pending write decides one of its rows).
6. At most ``limit`` writes pending; past it a write takes the confirmed path alone.
7. A row is judged over the confirmed rows, each pending key's newest on top; a ``Judging``
   lens judges a row with others (objects' ``f=``): a write, or a swap, changes the keys it reaches.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

#: Seconds a write may stay pending before it is withdrawn (rule 2).
CONFIRM_WITHIN = 30.0
#: Writes pending at most (rule 6).
MAX_PENDING = 4096

Key = Hashable
#: A row as one subscriber sees it (its columns, projected), or None: not in its view.
Row = Mapping[str, object] | None


class Lens(Protocol):
    """One watcher's view of its dataset, asked by the core (its kind makes it)."""

    def show(self, rows: Mapping[Key, Row]) -> dict[Key, Row]:
        """Whole rows of the dataset by key (None: deleted) as this view shows them, each None
        if the view does not select it."""
        ...

    def confirmed(self, keys: Iterable[Key]) -> dict[Key, Row]:
        """The confirmed rows of ``keys`` in this view now (the active state's)."""
        ...

    def holds(self, keys: Iterable[Key]) -> dict[Key, bool]:
        """Whether the push machinery believes the subscriber holds each of ``keys``."""
        ...

    def current(self) -> bool:
        """Whether the push machinery believes the subscriber holds the active state's view (its
        last push was cut from it)."""
        ...


@runtime_checkable
class Judging(Protocol):
    """A lens whose view judges a row with other rows (rule 7), asked where pending rows count."""

    def reach(self, keys: Iterable[Key], pending: Mapping[Key, Row]) -> set[Key]:
        """``keys`` and every key whose row in the view may change with theirs (``pending``:
        each pending key's newest whole row, None: deleted)."""
        ...

    def judged(self, keys: Iterable[Key], pending: Mapping[Key, Row]) -> dict[Key, Row]:
        """The rows of ``keys`` as the view shows them over the confirmed rows with ``pending``
        laid on top (None: not in the view)."""
        ...


@dataclass
class Patch:
    """Rows to send one subscription: a push's ``entered``, ``updated`` and ``left``."""

    sub: Hashable
    entered: dict[Key, Mapping[str, object]] = field(default_factory=dict)
    updated: dict[Key, Mapping[str, object]] = field(default_factory=dict)
    left: list[Key] = field(default_factory=list)
    provisional: bool = False

    def __bool__(self) -> bool:
        return bool(self.entered or self.updated or self.left)


@dataclass
class Write:
    """One pending write: its rows by key (None: deleted), where and until when it waits."""

    id: int
    dataset: str
    rows: dict[Key, Mapping[str, object] | None]
    deadline: float
    last: int | None = None  # the ingest offset that confirms it, once accepted


@dataclass
class Watcher:
    """A ``latest`` subscription taking live writes, and the keys where its subscriber holds
    what the push machinery does not believe it holds (rule 3)."""

    dataset: str
    lens: Lens
    shown: dict[Key, Row] = field(default_factory=dict)
    retiring: bool = False  # takes no new writes; dropped once nothing it was shown is owed
    judging: bool = False  # its lens is ``Judging`` (rule 7)


@dataclass
class Counters:
    """What the live path did, for ``/metrics``."""

    writes: int = 0
    skipped: int = 0
    confirmed: int = 0
    refused: int = 0
    withdrawn: int = 0
    shown: int = 0  # rows sent provisionally
    corrected: int = 0  # rows sent to undo what a subscriber was shown
    deduplicated: int = 0  # rows the confirmed path carried and the subscriber already held


def same(a: Row, b: Row) -> bool:
    """Whether two rows are the same row (NaN equal to NaN)."""
    if a is None or b is None:
        return a is b
    if a.keys() != b.keys():
        return False
    return all(_equal(a[name], b[name]) for name in a)


def _equal(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return bool(x == y)


class LiveWrites:
    """The relay's pending writes, its watchers and what each was shown (the rules above)."""

    def __init__(self, within: float = CONFIRM_WITHIN, limit: int = MAX_PENDING) -> None:
        self.within, self.limit = within, limit
        self.counters = Counters()
        self._writes: dict[int, Write] = {}
        self._overlay: dict[str, dict[Key, list[int]]] = {}  # dataset -> key -> pending ids
        self._ticks: dict[str, int] = {}  # dataset -> tick of its active state
        self._watchers: dict[Hashable, Watcher] = {}
        self._away = False  # the upstream link is lost
        self._held: set[str] = set()  # datasets with no state since the link came back

    def __len__(self) -> int:
        return len(self._writes)

    def __contains__(self, id: object) -> bool:
        """Whether write ``id`` is pending."""
        return id in self._writes

    # -- watchers ---------------------------------------------------------------------------

    def watch(self, sub: Hashable, dataset: str, lens: Lens) -> None:
        """``sub`` takes live writes from its next push on (its first, full push is reconciled
        too, so it starts with what is pending)."""
        self._watchers[sub] = Watcher(dataset, lens, judging=isinstance(lens, Judging))

    def forget(self, sub: Hashable) -> None:
        """``sub`` ended, or its next push is the full view again (its subscriber starts over)."""
        self._watchers.pop(sub, None)

    def retire(self, sub: Hashable) -> list[Patch]:
        """``sub`` now asks confirmed rows only: it is shown no new write, and sent the confirmed
        rows of what it was shown; it is forgotten once the machinery believes what it holds."""
        watcher = self._watchers.get(sub)
        if watcher is None:
            return []
        watcher.retiring = True
        keys = list(watcher.shown)
        patch = self._show(sub, watcher, self._targets(watcher, keys), provisional=False)
        self.counters.corrected += _rows(patch)
        if watcher.lens.current():
            watcher.shown.clear()
        self._drop_if_done(sub, watcher)
        return [patch] if patch else []

    def _drop_if_done(self, sub: Hashable, watcher: Watcher) -> None:
        if watcher.retiring and not watcher.shown:
            del self._watchers[sub]

    def watching(self, sub: Hashable) -> bool:
        """Whether pushes of ``sub`` must be reconciled (``reconcile``)."""
        watcher = self._watchers.get(sub)
        if watcher is None:
            return False
        return bool(watcher.shown) or (not watcher.retiring and self._pending_in(watcher.dataset))

    def _pending_in(self, dataset: str) -> bool:
        return bool(self._overlay.get(dataset))

    # -- writes -----------------------------------------------------------------------------

    def write(
        self, id: int, dataset: str, rows: Mapping[Key, Mapping[str, object] | None], now: float
    ) -> list[Patch]:
        """A write forwarded upstream under ``id``: shown to the watchers it concerns (rule 1)."""
        self.counters.writes += 1
        if len(self._writes) >= self.limit:
            self.counters.skipped += 1
            return []
        self._writes[id] = Write(id, dataset, dict(rows), now + self.within)
        overlay = self._overlay.setdefault(dataset, {})
        for key in rows:
            overlay.setdefault(key, []).append(id)
        patches = []
        for sub, watcher in self._watchers.items():
            if watcher.dataset == dataset and not watcher.retiring:
                targets = self._overlaid(watcher, self._reach(watcher, rows))
                patch = self._show(sub, watcher, targets, provisional=True)
                self.counters.shown += _rows(patch)
                patches.append(patch)
        return [patch for patch in patches if patch]

    def accepted(self, id: int, last: int) -> list[Patch]:
        """The publisher logged write ``id`` up to offset ``last``: confirmed by the first state
        with ``tick >= last``, which may be active already (rule 2)."""
        write = self._writes.get(id)
        if write is None:
            return []
        write.last = last
        if self._ticks.get(write.dataset, -1) >= last:
            return self._settle([write], "confirmed")
        return []

    def refused(self, id: int) -> list[Patch]:
        """The publisher refused write ``id``: undone where it was shown (rules 2, 5)."""
        write = self._writes.get(id)
        return [] if write is None else self._settle([write], "refused")

    def swapped(self, dataset: str, tick: int) -> list[Patch]:
        """A state of ``dataset`` at ``tick`` is active: the writes it carries are confirmed."""
        self._ticks[dataset] = tick
        if not self._away:
            self._held.discard(dataset)
        done = [
            w
            for w in self._writes.values()
            if w.dataset == dataset and w.last is not None and w.last <= tick
        ]
        return self._settle(done, "confirmed") + self._rejudge(dataset)

    def _rejudge(self, dataset: str) -> list[Patch]:
        """A judged row rests on confirmed rows too (rule 7), which a swap may change where no
        push of the watcher's confirmed view goes: its pending keys are shown anew, and a key
        shown that no pending write reaches now (its object's cell deleted) gets its confirmed
        row."""
        patches = []
        for sub, watcher in self._watchers.items():
            if watcher.judging and not watcher.retiring and watcher.dataset == dataset:
                affected = self._affected(watcher)
                stale = [k for k in watcher.shown if k not in affected]
                if stale:
                    targets = watcher.lens.confirmed(stale)
                    patch = self._show(sub, watcher, targets, provisional=False)
                    self.counters.corrected += _rows(patch)
                    patches.append(patch)
                targets = self._overlaid(watcher, affected)
                patch = self._show(sub, watcher, targets, provisional=True)
                self.counters.shown += _rows(patch)
                patches.append(patch)
        return [patch for patch in patches if patch]

    def expire(self, now: float) -> list[Patch]:
        """Withdraw the writes past their deadline, but those waiting for their stream (rule 2)."""
        for write in self._writes.values():
            if self._away or write.dataset in self._held:
                write.deadline = max(write.deadline, now + self.within)
        return self._settle([w for w in self._writes.values() if w.deadline <= now], "withdrawn")

    def away(self) -> list[Patch]:
        """The upstream link is lost: the writes not accepted are withdrawn (the publisher may
        never have logged them); the accepted ones wait for a new link (rule 2)."""
        self._away = True
        return self.withdraw(unaccepted_only=True)

    def back(self) -> None:
        """A new upstream link: each dataset's deadlines run again from its first state."""
        self._away = False
        self._held = {write.dataset for write in self._writes.values()}

    def withdraw(self, unaccepted_only: bool = False) -> list[Patch]:
        """Withdraw every pending write (a new epoch), or those not accepted yet (the upstream
        link lost: the publisher may never have logged them)."""
        gone = [w for w in self._writes.values() if not unaccepted_only or w.last is None]
        return self._settle(gone, "withdrawn")

    def _settle(self, writes: list[Write], how: str) -> list[Patch]:
        touched: dict[str, set[Key]] = {}
        for write in writes:
            del self._writes[write.id]
            setattr(self.counters, how, getattr(self.counters, how) + 1)
            overlay = self._overlay[write.dataset]
            for key in write.rows:
                ids = overlay[key]
                ids.remove(write.id)
                if not ids:
                    del overlay[key]
                touched.setdefault(write.dataset, set()).add(key)
        patches = []
        for sub, watcher in self._watchers.items():
            near = touched.get(watcher.dataset)
            keys = [k for k in self._reach(watcher, near) if k in watcher.shown] if near else []
            if not keys:
                continue
            patch = self._show(sub, watcher, self._targets(watcher, keys), provisional=False)
            self.counters.corrected += _rows(patch)
            pending = self._affected(watcher)
            if not watcher.retiring:  # a row another pending write decides is not confirmed
                patch.provisional = any(key in pending for key in _keys(patch))
            if watcher.lens.current():
                for key in keys:  # the machinery's belief is now what the subscriber holds
                    if key not in pending:
                        watcher.shown.pop(key, None)
            patches.append(patch)
        return [patch for patch in patches if patch]

    # -- pushes of the confirmed path ---------------------------------------------------------

    def reconcile(self, push: Patch, full: bool) -> Patch:
        """A push the machinery cut from the active state, as the subscriber must get it (rule 4;
        ``full``: it replaces the subscriber's whole view). Afterwards the machinery believes the
        subscriber holds the active view, so only pending keys stay in ``shown``; a pending key
        shown and not carried stays as it is (``shown`` holds its newest write's row)."""
        watcher = self._watchers.get(push.sub)
        if watcher is None:
            return push
        # A retiring watcher is sent the confirmed rows of whatever it was shown.
        pending = {} if watcher.retiring else self._affected(watcher)
        held = {} if full else watcher.shown
        carried: dict[Key, Row] = {**push.entered, **push.updated, **dict.fromkeys(push.left)}
        shown = {k: row for k, row in held.items() if k in pending and k not in carried}
        settled = [k for k in held if k not in carried and k not in pending]
        fresh = [k for k in pending if k not in carried and k not in held]  # not shown yet
        now = watcher.lens.confirmed(settled + fresh) if settled or fresh else {}
        keys = [*carried, *settled, *fresh]
        overlaid = self._overlaid(watcher, [k for k in keys if k in pending]) if pending else {}
        out = Patch(push.sub)
        for key in keys:
            if key in pending:
                target = shown[key] = overlaid[key]
            else:
                target = carried[key] if key in carried else now[key]
            before: Row | _Unknown
            if key in held:
                before = held[key]
                has = before is not None
            elif full:
                before, has = None, False
            elif key in carried:  # the machinery's delta says whether it was held
                before, has = _unknown, key not in push.entered
            else:  # unchanged by this push: the machinery's row, the confirmed one
                before = now[key]
                has = before is not None
            if not isinstance(before, _Unknown) and same(before, target):
                if key in carried:
                    self.counters.deduplicated += 1
                continue
            _put(out, key, target, has)
            out.provisional |= key in pending
        watcher.shown = shown
        self._drop_if_done(push.sub, watcher)
        return out

    # -- helpers ----------------------------------------------------------------------------

    def newest(self, dataset: str) -> Mapping[Key, Row]:
        """Each pending key of ``dataset`` with its newest pending write's whole row (None:
        deleted), looked up as asked."""
        return _Newest(self._overlay.get(dataset, {}), self._writes)

    def _reach(self, watcher: Watcher, keys: Iterable[Key]) -> dict[Key, None]:
        """``keys`` and the keys whose rows they may change in the watcher's view (rule 7)."""
        if watcher.judging:
            lens = cast(Judging, watcher.lens)
            return dict.fromkeys(lens.reach(keys, self.newest(watcher.dataset)))
        return dict.fromkeys(keys)

    def _affected(self, watcher: Watcher) -> Mapping[Key, object]:
        """The keys whose rows the pending writes decide in the watcher's view."""
        overlay = self._overlay.get(watcher.dataset, {})
        return self._reach(watcher, overlay) if watcher.judging and overlay else overlay

    def _overlaid(self, watcher: Watcher, keys: Iterable[Key]) -> dict[Key, Row]:
        """``keys``'s rows in the watcher's view, pending rows on top of the confirmed (rule 7)."""
        keys = list(keys)
        if not keys:
            return {}
        if watcher.judging:
            return cast(Judging, watcher.lens).judged(keys, self.newest(watcher.dataset))
        pending = self.newest(watcher.dataset)
        newest = {k: pending[k] for k in keys if k in pending}
        shown = watcher.lens.show(newest) if newest else {}
        confirmed = watcher.lens.confirmed([k for k in keys if k not in newest])
        return {k: shown[k] if k in newest else confirmed[k] for k in keys}

    def _targets(self, watcher: Watcher, keys: list[Key]) -> dict[Key, Row]:
        if watcher.retiring:
            return watcher.lens.confirmed(keys)
        return self._overlaid(watcher, keys)

    def _show(
        self, sub: Hashable, watcher: Watcher, targets: Mapping[Key, Row], *, provisional: bool
    ) -> Patch:
        """Send ``sub`` each target that differs from what it holds; remember it as shown.

        At a key not in ``shown`` the subscriber holds the machinery's row: the confirmed one if
        its last push was cut from the active state, else a row of unknown value (sent anew).
        """
        patch = Patch(sub, provisional=provisional)
        fresh = [key for key in targets if key not in watcher.shown]
        holds = watcher.lens.holds(fresh) if fresh else {}
        current = bool(fresh) and watcher.lens.current()
        confirmed = watcher.lens.confirmed(fresh) if current else {}
        for key, target in targets.items():
            before: Row | _Unknown
            if key in watcher.shown:
                before = watcher.shown[key]
                has = before is not None
            else:
                before = confirmed[key] if current else _unknown
                has = holds[key]
            watcher.shown[key] = target
            if isinstance(before, _Unknown):
                if target is None and not has:
                    continue
            elif same(before, target):
                continue
            _put(patch, key, target, has)
        return patch


class _Newest(Mapping[Key, Row]):
    """The newest pending row of each key of a dataset (``LiveWrites.newest``)."""

    def __init__(self, overlay: Mapping[Key, list[int]], writes: Mapping[int, Write]) -> None:
        self._overlay, self._writes = overlay, writes

    def __getitem__(self, key: Key) -> Row:
        return self._writes[self._overlay[key][-1]].rows[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._overlay)

    def __len__(self) -> int:
        return len(self._overlay)


def _put(patch: Patch, key: Key, target: Row, has: bool) -> None:
    """Add ``target`` for ``key`` to ``patch``: left, updated or entered."""
    if target is None:
        if has:
            patch.left.append(key)
    elif has:
        patch.updated[key] = target
    else:
        patch.entered[key] = target


class _Unknown:
    """What a subscriber held at a key the confirmed path changed: the machinery's old row."""


_unknown = _Unknown()


def _keys(patch: Patch) -> Iterator[Key]:
    yield from patch.entered
    yield from patch.updated
    yield from patch.left


def _rows(patch: Patch) -> int:
    return len(patch.entered) + len(patch.updated) + len(patch.left)
