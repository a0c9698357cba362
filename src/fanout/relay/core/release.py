"""Which upstream primitives of a SQL, topic or path dataset no subscription needs any more.

A primitive may go when every need (each subscription's part of the dataset,
``relay.kinds.keyed``) stays covered by the other ready primitives; the oldest go first, as for
regions (``relay.core.planner.unneeded``). Asked naively that is cubic in the subscriptions, so
each need is paired once with the ready primitives that meet it (its language's
:class:`ReleasePart`: ``probes``, then ``meets``), and a primitive's release is decided by the
needs it meets alone. The answer is the naive one's (a property test compares the two); why and
how: docs/architecture.md, "Inside the relay".
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from fanout.relay.core.upstream import Primitive
from fanout.views import View, covers, registry

T = TypeVar("T")


def unneeded(prims: Sequence[Primitive], needs: Sequence[View]) -> list[Primitive]:
    """Primitives that can go, oldest first: every need stays covered by the other ready ones."""
    alive = sorted(prims, key=lambda p: p.prim)
    meeting = _Meeting([p for p in alive if p.ready], needs)
    if not all(meeting.covered(at) for at in range(len(needs))):
        return []  # a need the ready primitives do not cover: each of them may be part of it
    gone: list[Primitive] = []
    for prim in alive:
        if needs and not meeting.others(prim.prim):
            continue  # the last ready primitive stays while anything is needed
        if all(meeting.covered(at, without=prim.prim) for at in meeting.met_by(prim.prim)):
            gone.append(prim)
            meeting.drop(prim.prim)
    return gone


class ReleasePart:
    """What release asks a view language (``views.registry.Language.release``); this class's
    answers are those of a language that has none: its views may meet any of its language's,
    and are found under no key."""

    def meets(self, a: View, b: View) -> bool:
        """Whether two views of the language could share a topic, object or row."""
        return True

    def registered(self, view: View) -> list[Hashable] | None:
        """The keys a held primitive ``view`` is found under (None: under none)."""
        return None

    def probes(self, view: View) -> list[Hashable] | None:
        """The keys under which every held primitive that may meet ``view`` is found, none
        under two of them (None: look at every one)."""
        return None

    def among(self, views: Sequence[View]) -> Callable[[View], list[int]] | None:
        """For the primitives found under a view's one probe, a faster finder of those that may
        meet it (their positions in ``views``); None: every one found."""
        return None


_GENERIC = ReleasePart()


def _part(view: View) -> ReleasePart:
    part: ReleasePart | None = registry.part_for(view, "release")
    return _GENERIC if part is None else part


def meets(a: View, b: View) -> bool:
    """Whether ``a`` and ``b`` could share a topic, object or row (True when not known; views
    of different kinds select from different datasets: False)."""
    if registry.view_language(a) != registry.view_language(b):
        return False
    return _part(a).meets(a, b)


def registered(view: View) -> list[Hashable] | None:
    """The keys a held primitive is found under (None: under none, as it may meet any view;
    see ``probes``)."""
    return _part(view).registered(view)


def probes(view: View) -> list[Hashable] | None:
    """The keys under which every held primitive that may meet ``view`` is found, none under
    two of them (None: look at every one): by its language's part (see the module)."""
    return _part(view).probes(view)


class _Index(Generic[T]):
    """Items found by their views' ``registered`` keys."""

    def __init__(self, items: Sequence[T], view_of: Callable[[T], View]) -> None:
        self.items = items
        self.view_of = view_of
        self.found: dict[Hashable, list[T]] = {}
        self.wide: list[T] = []  # found under no key: they may meet anything
        for item in items:
            keys = registered(view_of(item))
            if keys is None:
                self.wide.append(item)
                continue
            for key in keys:
                self.found.setdefault(key, []).append(item)
        self._among: dict[Hashable, Callable[[View], list[int]] | None] = {}

    def meeting(self, view: View) -> list[T]:
        """The items whose views meet ``view``."""
        part, language = _part(view), registry.view_language(view)

        def meeting(item: T) -> bool:  # ``meets``, the view's language found once
            other = self.view_of(item)
            return registry.view_language(other) == language and part.meets(other, view)

        probe = part.probes(view)
        found: Iterable[T]
        if probe is None:
            return [item for item in self.items if meeting(item)]
        if len(probe) == 1 and (among := self._finder(part, probe[0])) is not None:
            under = self.found.get(probe[0], [])  # one key: narrowed by the language
            found = [under[at] for at in among(view)]
        else:  # no item is under two of one view's probes
            found = (item for key in probe for item in self.found.get(key, ()))
        return [item for item in itertools.chain(found, self.wide) if meeting(item)]

    def _finder(self, part: ReleasePart, key: Hashable) -> Callable[[View], list[int]] | None:
        if key not in self._among:
            under = self.found.get(key, [])
            self._among[key] = part.among([self.view_of(item) for item in under])
        return self._among[key]


def near(views: Sequence[View], others: Sequence[View]) -> list[View]:
    """The ``views`` that may share a topic, object or row with one of ``others``."""
    index = _Index(others, lambda view: view)
    return [view for view in views if index.meeting(view)]


class _Meeting:
    """The ready primitives meeting each need, and the needs each primitive meets."""

    def __init__(self, ready: list[Primitive], needs: Sequence[View]) -> None:
        self.needs = needs
        self.held = {p.prim for p in ready}
        index = _Index(ready, lambda prim: prim.view)
        self.users = [index.meeting(need) for need in needs]
        self.met: dict[int, list[int]] = {}
        for at, users in enumerate(self.users):
            for prim in users:
                self.met.setdefault(prim.prim, []).append(at)

    def covered(self, at: int, without: int | None = None) -> bool:
        """Whether need ``at`` is covered by the held primitives meeting it (but ``without``)."""
        rest = [p.view for p in self.users[at] if p.prim in self.held and p.prim != without]
        return covers(rest, self.needs[at])

    def met_by(self, prim: int) -> list[int]:
        """The needs primitive ``prim`` meets (none if it is not ready)."""
        return self.met.get(prim, [])

    def others(self, prim: int) -> bool:
        """Whether a ready primitive other than ``prim`` is held."""
        return len(self.held) > (prim in self.held)

    def drop(self, prim: int) -> None:
        """``prim`` is released."""
        self.held.discard(prim)
