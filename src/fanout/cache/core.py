"""The snoopy cache's decisions, without I/O (Liebig et al., §4.1.1-4.1.2): which version of an
object to keep, which objects a label collection holds, what to evict, how fragments make a
message. ``cache.client`` moves the bytes; the reference is docs/caches.md. Rules:

1. **Newer wins.** A message is taken only if its version is above the one held; a deletion is
   kept as a tombstone; an object never there answers a load with version 0.
2. **Only what is wanted:** objects asked for (``want``) or selected by a followed pattern.
3. **Collections** hold the objects of their type whose label the pattern matches
   (``wire.bus.tokens_match``); they are pinned, never evicted.
4. **Bounded.** At most ``capacity`` unpinned objects, least recently used evicted; evicted
   versions are remembered (``FLOORS_PER_OBJECT`` x ``capacity``) so rule 1 holds across a fault.
5. **Counted:** ``hits``, ``faults`` (simultaneous ones share one ``LOAD``), ``snooped``,
   ``stale``, ``evicted``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from fanout.wire.bus import ObjectKind, ObjectMessage, Row, label_tokens, tokens_match

Ref = tuple[str, int | str]
#: Evicted objects' versions remembered, per object of capacity (rule 4).
FLOORS_PER_OBJECT = 8
#: Messages whose fragments are still coming, at most; the oldest is dropped beyond it.
MAX_PARTIAL = 1024


@dataclass
class Entry:
    """One object as the cache holds it.

    Attributes:
        version: the newest version taken (-1: none yet: the object is not valid).
        found: whether the object exists at that version (False: deleted, or never there).
        row: its state (None when not found).
        label: its label (None: none).
    """

    version: int = -1
    found: bool = False
    row: Row | None = None
    label: str | None = None

    @property
    def valid(self) -> bool:
        """Whether a version was taken (the object can be read without loading)."""
        return self.version >= 0


@dataclass(frozen=True)
class Change:
    """An object message taken (rule 1): what the application is told.

    Attributes:
        kind: the message's kind (``LOADREPLY``, ``UPDATENOTIFY``, ``CREATE``, ``DELETE``).
        ref: (type, key).
        version: the version now held.
        row: the state now held (None: the object does not exist).
        label: its label.
        sent: when the connector published it (its wall clock).
    """

    kind: ObjectKind
    ref: Ref
    version: int
    row: Row | None
    label: str | None
    sent: float


@dataclass
class Counters:
    """Rule 5's counts."""

    hits: int = 0
    faults: int = 0
    snooped: int = 0
    stale: int = 0
    evicted: int = 0
    malformed: int = 0


@dataclass
class Collection:
    """A followed label pattern of one type (rule 3)."""

    type_name: str
    pattern: tuple[str, ...]
    members: set[int | str] = field(default_factory=set)


class CacheCore:
    """The objects a cache holds and its collections (rules 1-5)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a cache holds at least one object, not {capacity}")
        self.capacity = capacity
        self.counters = Counters()
        #: Objects asked for, least recently used first.
        self.objects: OrderedDict[Ref, Entry] = OrderedDict()
        self.collections: dict[int, Collection] = {}
        self._pins: dict[Ref, int] = {}
        self._floors: OrderedDict[Ref, int] = OrderedDict()
        self._next_collection = 0
        #: Objects evicted while taking messages (rule 4), for the shell to unsubscribe.
        self.evicted: list[Ref] = []

    # -- asking ----------------------------------------------------------------------------------

    def want(self, ref: Ref) -> list[Ref]:
        """Hold ``ref`` (an application's ``find_by_key``), most recently used.

        Returns:
            The objects evicted to make room (rule 4): their subscriptions can go.
        """
        if ref in self.objects:
            self.objects.move_to_end(ref)
            return []
        self.objects[ref] = Entry()
        return self._evict()

    def read(self, ref: Ref) -> Entry | None:
        """The object if it is valid (counted as a hit, made most recently used), else None (the
        caller loads it: ``fault``)."""
        entry = self.objects.get(ref)
        if entry is None or not entry.valid:
            return None
        self.objects.move_to_end(ref)
        self.counters.hits += 1
        return entry

    def fault(self, ref: Ref) -> None:
        """Count an access that must load ``ref`` (rule 5)."""
        self.counters.faults += 1

    def follow(self, type_name: str, pattern: tuple[str, ...]) -> int:
        """Follow a label pattern (already checked: ``wire.bus.pattern_tokens``).

        Returns:
            The collection's id.
        """
        self._next_collection += 1
        self.collections[self._next_collection] = Collection(type_name, pattern)
        return self._next_collection

    def unfollow(self, collection: int) -> None:
        """Stop following a collection; its members are no longer pinned."""
        gone = self.collections.pop(collection, None)
        if gone is not None:
            for key in gone.members:
                self._unpin((gone.type_name, key))

    # -- snooping --------------------------------------------------------------------------------

    def offer(
        self,
        kind: ObjectKind,
        ref: Ref,
        *,
        version: int,
        row: Row | None,
        label: str | None,
        sent: float = 0.0,
        own: bool = False,
    ) -> Change | None:
        """Take an object message if it is wanted and newer (rules 1-3).

        Args:
            kind: the message's kind.
            ref: (type, key) from its subject.
            version: its version.
            row: the object's state (None: it does not exist).
            label: its label, from its state (not its subject: an object whose label moved is
                published under its old label too, with the new one in its state).
            sent: when the connector published it.
            own: it answers this cache's own load (not counted as snooped).

        Returns:
            The change the application is told of, or None if nothing changed.
        """
        entry = self.objects.get(ref)
        exists = row is not None
        tokens = label_tokens(label)
        if entry is None and ref not in self._pins and not self._joins(ref, tokens, exists):
            return None
        floor = self.shown_floor(ref)
        if kind == "LOADREPLY" and not exists and version == 0:
            # "Not there" is as of now (replies come in the connector's order): taken unless a
            # version is already held, without going below one remembered.
            if entry is not None and entry.valid:
                self.counters.stale += 1
                return None
            version = max(floor, 0)
        elif version < floor or (entry is not None and entry.valid and version <= entry.version):
            # Older than shown, or the version held again (a repeat). The version an evicted
            # object had is taken again: it is not older than what was shown.
            self.counters.stale += 1
            return None
        self._place(ref, tokens, exists)
        if entry is None:
            entry = self.objects[ref] = Entry()
        entry.version, entry.found, entry.row, entry.label = version, exists, row, label
        self._floors.pop(ref, None)
        if not own:
            self.counters.snooped += 1
        self.evicted.extend(self._evict())
        return Change(kind, ref, version, row, label, sent)

    def _joins(self, ref: Ref, tokens: tuple[str, ...], exists: bool) -> bool:
        """Whether a collection would take ``ref`` with this label (rule 3)."""
        return exists and any(
            c.type_name == ref[0] and tokens_match(c.pattern, tokens)
            for c in self.collections.values()
        )

    def _place(self, ref: Ref, tokens: tuple[str, ...], exists: bool) -> None:
        """Join or leave the collections of ``ref``'s type (rule 3)."""
        type_name, key = ref
        for collection in self.collections.values():
            if collection.type_name != type_name:
                continue
            inside = exists and tokens_match(collection.pattern, tokens)
            if inside and key not in collection.members:
                collection.members.add(key)
                self._pins[ref] = self._pins.get(ref, 0) + 1
            elif not inside and key in collection.members:
                collection.members.discard(key)
                self._unpin(ref)

    def _unpin(self, ref: Ref) -> None:
        left = self._pins.get(ref, 0) - 1
        if left > 0:
            self._pins[ref] = left
        else:
            self._pins.pop(ref, None)

    # -- bounding --------------------------------------------------------------------------------

    def _evict(self) -> list[Ref]:
        """Evict least recently used unpinned objects beyond ``capacity`` (rule 4)."""
        unpinned = [ref for ref in self.objects if ref not in self._pins]
        evicted: list[Ref] = []
        for ref in unpinned[: max(0, len(unpinned) - self.capacity)]:
            entry = self.objects.pop(ref)
            floor = max(entry.version, self._floors.pop(ref, -1))
            if floor >= 0:
                self._floors[ref] = floor
            evicted.append(ref)
        self.counters.evicted += len(evicted)
        while len(self._floors) > FLOORS_PER_OBJECT * self.capacity:
            self._floors.popitem(last=False)
        return evicted

    def unpinned(self) -> int:
        """How many held objects no collection pins (at most ``capacity``)."""
        return sum(1 for ref in self.objects if ref not in self._pins)

    def shown_floor(self, ref: Ref) -> int:
        """The newest version of ``ref`` this cache took (-1: none), held or remembered."""
        entry = self.objects.get(ref)
        return max(entry.version if entry else -1, self._floors.get(ref, -1))


@dataclass
class _Partial:
    parts: list[bytes | None]
    missing: int


class Reassembly:
    """Fragments of object messages put back together by (subject, request, version) (Liebig
    et al., §4.1.2: "reassembles the fragments according to a common request_id").

    At most ``MAX_PARTIAL`` messages wait for fragments; beyond that the oldest is dropped
    (counted in ``dropped``); its object is loaded again if an application reads it.
    """

    def __init__(self, max_partial: int = MAX_PARTIAL) -> None:
        self.max_partial = max_partial
        self.dropped = 0
        self._waiting: OrderedDict[tuple[str, str, int], _Partial] = OrderedDict()

    def add(self, subject: str, message: ObjectMessage) -> bytes | None:
        """Take one fragment of the message under ``subject``.

        Returns:
            The whole message's data once every fragment came, else None.

        Raises:
            ValueError: the fragment's numbering is impossible (``part`` outside ``parts``, or
                ``parts`` other than earlier fragments said).
        """
        part, parts, data = message.part, message.parts, message.data
        if parts < 1 or not 0 <= part < parts:
            raise ValueError(f"fragment {part} of {parts} is no fragment")
        if parts == 1:
            return data
        slot = (subject, message.request, message.version)
        waiting = self._waiting.get(slot)
        if waiting is None:
            waiting = self._waiting[slot] = _Partial([None] * parts, parts)
            while len(self._waiting) > self.max_partial:
                self._waiting.popitem(last=False)
                self.dropped += 1
        elif len(waiting.parts) != parts:
            raise ValueError(f"fragment {part} says {parts} parts; earlier ones said otherwise")
        if waiting.parts[part] is None:
            waiting.parts[part] = data
            waiting.missing -= 1
        if waiting.missing:
            return None
        del self._waiting[slot]
        return b"".join(piece for piece in waiting.parts if piece is not None)

    @property
    def partial(self) -> int:
        """Messages waiting for fragments."""
        return len(self._waiting)
