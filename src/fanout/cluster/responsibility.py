"""The shared map of responsibility: which live relay is responsible for which part of each
dataset (CA 3197003 [0116]; [0111], Fig. 9: a request landing at another is sent on to it).
Pure: no I/O, no clock; ``cluster.registry`` keeps the members in Redis and hands them here.
Parts, owners and why: docs/cluster.md, "A map of responsibility".

1. **Parts.** A subscription belongs to one part of its dataset (:func:`part_of`): a grid cell,
   a topic subtree, a directory, a hash bucket of an entity's key or of the view's text. Each
   view language names its parts (``MapPart``); this module names no language's views.
2. **Owners.** A part's owner is the live member of highest rendezvous weight: every relay
   reading the same members names the same owner; a member joining or leaving moves ~1/n.
3. **Names, not addresses.** A relay restarted under its name gets its parts back.
4. **Standbys and assignments.** A standby owns nothing by rendezvous; a part a split assigned
   to a live member is that member's, until its lease runs out.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fanout.errors import FanoutError
from fanout.views import View, registry, to_text

#: Side of the grid of cells space datasets are split into, in world units.
DEFAULT_SIDE = 256.0
#: Hash buckets the views of other datasets are split into.
BUCKETS = 256
#: Literal levels of a topic filter that name its part (rule 1): deep enough that one busy
#: first level (``sensors/...``) is still several parts a split can hand over one by one.
TOPIC_DEPTH = 2


class NoLiveRelay(FanoutError):
    """The map has no member: nobody is responsible for anything."""

    code = "unavailable"


def part_of(dataset: str, view: View, side: float = DEFAULT_SIDE) -> str:
    """The part of ``dataset`` a subscription to ``view`` belongs to (rule 1).

    Args:
        dataset: the dataset's name.
        view: the subscription's view.
        side: the grid's side for region views, > 0.

    Returns:
        ``"<dataset>/cell:i,j[,k]"`` for a region view, ``"<dataset>/topic:<levels>"`` for a
        topic filter starting with a literal level, ``"<dataset>/dir:<directory>"`` for an
        object path, ``"<dataset>/bucket:n"`` otherwise.

    Raises:
        ValueError: ``side`` is not a positive finite number.
    """
    if not (math.isfinite(side) and side > 0):
        raise ValueError(f"the grid's side {side!r} must be a positive number of world units")
    language: MapPart | None = registry.part_for(view, "map")
    part = None if language is None else language.part(view, side)
    if part is None:
        part = f"bucket:{bucket(f'view:{to_text(view)}')}"
    return f"{dataset}/{part}"


class MapPart:
    """What the map asks a view language (``views.registry.Language.map``): the part of a
    dataset a view of it falls in (rule 1), or None: a hash bucket of its text (this class's
    answer, that of a language that has none)."""

    def part(self, view: View, side: float) -> str | None:
        """``view``'s part, after the dataset's name and ``/`` (``side``: the grid's side)."""
        return None


def bucket(text: str) -> int:
    """The hash bucket of ``text``, one of ``BUCKETS``."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


def weight(part: str, member: str) -> int:
    """The rendezvous weight of ``member`` for ``part`` (rule 2): 64 bits of a hash of both."""
    digest = hashlib.blake2b(f"{part}\x00{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Member:
    """A live relay of the map: its name and the URL subscribers reach it at."""

    name: str
    url: str


@dataclass(frozen=True)
class Assignment:
    """A part handed over by a split (rule 4): ``member`` holds it, ``giver`` handed it.

    Attributes:
        ready: ``member`` holds ``warm`` ready (or there was nothing to warm): the giver ends
            its subscriptions of the part now (``cluster.handover``).
        warm: what ``member`` acquires before it is ready, a view's text ("": nothing).
    """

    member: str
    giver: str
    ready: bool = True
    warm: str = ""

    def stored(self) -> str:
        """As the registry keeps it: its fields, one a line (``parse`` reads it back)."""
        return f"{self.member}\n{self.giver}\n{int(self.ready)}\n{self.warm}"

    @classmethod
    def parse(cls, text: str) -> Assignment:
        """An assignment as ``stored`` wrote it, or as an older relay did: ``member`` and
        ``giver`` alone (ready, nothing to warm)."""
        fields = text.split("\n", 3)
        member, giver = fields[0], fields[1] if len(fields) > 1 else ""
        ready = len(fields) < 3 or fields[2] != "0"
        return cls(member, giver, ready, fields[3] if len(fields) > 3 else "")


@dataclass(frozen=True)
class ResponsibilityMap:
    """The live members and who owns each part.

    Attributes:
        members: name -> URL of every live relay.
        side: the grid's side for space datasets (the same on every relay of a cluster).
        standby: the members that own nothing by rendezvous (rule 4).
        assigned: part -> the assignment a split made of it (rule 4).
    """

    members: Mapping[str, str] = field(default_factory=dict)
    side: float = DEFAULT_SIDE
    standby: frozenset[str] = frozenset()
    assigned: Mapping[str, Assignment] = field(default_factory=dict)

    def owner(self, part: str) -> Member:
        """The member responsible for ``part`` (rules 2 and 4).

        Raises:
            NoLiveRelay: the map has no member.
        """
        assignment = self.assigned.get(part)
        if assignment is not None and assignment.member in self.members:
            return Member(assignment.member, self.members[assignment.member])
        return self.rendezvous_owner(part)

    def rendezvous_owner(self, part: str) -> Member:
        """The member rendezvous hashing makes responsible for ``part``, assignments aside
        (rule 2; standbys only if every member is one).

        Raises:
            NoLiveRelay: the map has no member.
        """
        if not self.members:
            raise NoLiveRelay("no relay is in the map of responsibility")
        owners = [member for member in self.members if member not in self.standby]
        # Ties (equal 64-bit weights) fall to the greater name, so every relay agrees.
        name = max(owners or self.members, key=lambda member: (weight(part, member), member))
        return Member(name, self.members[name])

    def received(self, member: str) -> list[str]:
        """The parts assigned to ``member`` while it is live, in order."""
        if member not in self.members:
            return []
        return sorted(part for part, held in self.assigned.items() if held.member == member)

    def idle_standbys(self, but: str = "") -> list[str]:
        """The live standbys holding no assignment (apart from ``but``), in name order: where
        a split may hand parts."""
        busy = {held.member for held in self.assigned.values()}
        return sorted(
            name for name in self.standby if name in self.members and name not in busy | {but}
        )

    def owner_of(self, dataset: str, view: View) -> Member:
        """The member responsible for a subscription to ``view`` of ``dataset``.

        Raises:
            NoLiveRelay: the map has no member.
        """
        return self.owner(part_of(dataset, view, self.side))

    def with_members(self, members: Mapping[str, str]) -> ResponsibilityMap:
        """The same map over other members (standbys and assignments kept)."""
        return ResponsibilityMap(dict(members), self.side, self.standby, self.assigned)


def taken_from(before: ResponsibilityMap, after: ResponsibilityMap, me: str, part: str) -> bool:
    """Whether ``part`` left relay ``me`` when the map changed from ``before`` to ``after``:
    ``me`` owned it, and another member owns it now — a split or a merge assigned it elsewhere
    (rule 4), or a member joined that wins it (rule 2). A member leaving takes no part from the
    others. No part leaves a relay that reads a map without itself (its lease lapsed while it
    was alive: it registers again at its next beat, and keeps what it holds meanwhile).
    """
    if not before.members or me not in after.members:
        return False
    return before.owner(part).name == me and after.owner(part).name != me


def moved(before: ResponsibilityMap, after: ResponsibilityMap, parts: Iterable[str]) -> list[str]:
    """Which of ``parts`` change owner from ``before`` to ``after`` (by name), in order.

    A part that has no owner on one side (an empty map) counts as moved.
    """
    changed = []
    for part in parts:
        old = before.owner(part).name if before.members else None
        new = after.owner(part).name if after.members else None
        if old != new:
            changed.append(part)
    return changed
