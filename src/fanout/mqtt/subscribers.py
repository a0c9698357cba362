"""Who gets a message on one relay: every session's topic filters in one match index. Rules
(broker rule 4):

1. A message goes to every session with a matching plain subscription once, at the highest QoS
   of its matching subscriptions, capped by the message's (3.3.5), with the Subscription
   Identifiers of all of them; not back to its publisher under No Local.
2. Of each matching ``$share`` group, one member gets it, taken in turn (5.0 4.8.2) among those
   whose rights let them read it (``mqtt.rights``); or only of the groups named (in a cluster,
   the cluster chooses which relay serves a group).
3. Every filter added or removed is noted (``take_changes``): the cluster's shared match table
   follows them.
4. A message's plain targets are kept by (topic, QoS, retain) until a subscription changes, and
   reused unless a No Local one matches (``$share`` members are chosen each time): most
   messages go to topics seen the tick before (connections, versions, rights read at a send).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection

from fanout.mqtt import packets as p
from fanout.mqtt.sessions import Session, Subscription, Target, add_target
from fanout.views.topic.index import TopicIndex

#: Which plain subscriptions a message goes to: all or none, or those a callable keeps (by
#: client id and filter).
Plain = bool | Callable[[str, str], bool]

#: Topics whose targets are kept at most (rule 4): the oldest kept goes first past it.
KEPT_TOPICS = 8192


class Subscribers:
    """The subscriptions of one relay's sessions, matched by topic."""

    def __init__(self) -> None:
        self._index = TopicIndex()
        #: Each subscription by its id: its session, and itself (None: a ``$share`` one).
        self._subscribers: dict[int, tuple[Session, Subscription | None]] = {}
        self._ids = itertools.count(1)
        self._turns: dict[str, int] = {}  # $share filter -> its next member's turn
        self._changes: list[tuple[str, int]] = []
        self._shared = 0  # ``$share`` subscriptions held: none, no look-up of them per message
        self._filters: dict[str, int] = {}  # each filter held, and by how many sessions
        self._kept: dict[tuple[str, int, bool], list[Target]] = {}  # rule 4

    def install(self, session: Session, sub: Subscription) -> None:
        """Add (or replace) ``sub`` of ``session``."""
        known = session.subscriptions.get(sub.filter)
        sub_id = known[0] if known else next(self._ids)
        if known is None:
            self._changes.append((sub.filter, 1))
            self._filters[sub.filter] = self._filters.get(sub.filter, 0) + 1
        session.subscriptions[sub.filter] = (sub_id, sub)
        shared = sub.filter.startswith("$share/")
        self._shared += shared and known is None
        self._subscribers[sub_id] = (session, None if shared else sub)
        self._index.add(sub.filter, sub_id)
        self._kept.clear()

    def remove(self, session: Session, text: str) -> bool:
        """Remove ``session``'s subscription ``text``; whether it had one."""
        known = session.subscriptions.pop(text, None)
        if known is None:
            return False
        self._drop(text, known[0])
        return True

    def remove_all(self, session: Session) -> None:
        """Remove every subscription of ``session`` (its end)."""
        for text, (sub_id, _) in session.subscriptions.items():
            self._drop(text, sub_id)
        session.subscriptions.clear()

    def _drop(self, text: str, sub_id: int) -> None:
        self._kept.clear()
        self._index.remove(text, sub_id)
        del self._subscribers[sub_id]
        self._shared -= text.startswith("$share/")
        self._changes.append((text, -1))
        if (held := self._filters.pop(text) - 1) > 0:
            self._filters[text] = held

    def filters(self) -> Collection[str]:
        """Every filter a session here holds (persistent ones away too), ``$share`` ones whole."""
        return self._filters.keys()

    def take_changes(self) -> list[tuple[str, int]]:
        """(filter, +1 or -1) for every subscription added or removed since the last call."""
        changes, self._changes = self._changes, []
        return changes

    def targets(
        self, message: p.Publish, origin: str, plain: Plain, shares: Collection[str] | None
    ) -> list[Target]:
        """(session, QoS, retain flag, subscription identifiers) of each session ``message``
        goes to (rules 1-2), not to be changed (rule 4); ``plain``: to the plain subscriptions
        (a callable: to those it keeps, by client id and filter); ``shares``: the groups to
        serve (None: every one)."""
        if plain is True:
            targets = self._kept_plain(message, origin)
        else:
            keep = None if isinstance(plain, bool) else plain
            targets = self._plain(message, origin, keep)[0] if plain else []
        shared = self._index.match_shared(message.topic) if self._shared else {}
        if not shared:
            return targets
        by_client = {target[0].client_id: target for target in targets}  # a copy: rule 4
        for text, members in sorted(shared.items()):
            if shares is not None and text not in shares:
                continue
            ordered = [m for m in sorted(members) if self._reads(m, message.topic)]
            if not ordered:
                continue
            turn = self._turns.get(text, 0)
            self._turns[text] = turn + 1
            session, _ = self._subscribers[ordered[turn % len(ordered)]]
            add_target(by_client, session, session.subscriptions[text][1], message, "")
        return list(by_client.values())

    def _kept_plain(self, message: p.Publish, origin: str) -> list[Target]:
        """The targets of every plain subscription, kept by topic (rule 4)."""
        key = (message.topic, message.qos, message.retain)
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        found, local = self._plain(message, origin, None)
        if not local:
            if len(self._kept) >= KEPT_TOPICS:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = found
        return found

    def _plain(
        self, message: p.Publish, origin: str, keep: Callable[[str, str], bool] | None
    ) -> tuple[list[Target], bool]:
        """The targets of the plain subscriptions ``keep`` keeps (None: all), and whether a No
        Local one matched (they then depend on ``origin``)."""
        targets: dict[str, Target] = {}
        subscribers, local = self._subscribers, False
        for sub_id in self._index.match(message.topic):
            session, sub = subscribers[sub_id]
            if sub is not None and (keep is None or keep(session.client_id, sub.filter)):
                local = local or sub.no_local
                add_target(targets, session, sub, message, origin)  # shared: in ``targets``
        return list(targets.values()), local

    def highest_qos(self, topic: str, plain: Callable[[str, str], bool]) -> int:
        """The highest QoS of the plain subscriptions matching ``topic`` that ``plain`` keeps
        (by client id and filter); -1 for none."""
        subscribers, found = self._subscribers, -1
        for sub_id in self._index.match(topic):
            session, sub = subscribers[sub_id]
            if sub is not None and sub.qos > found and plain(session.client_id, sub.filter):
                found = sub.qos
        return found

    def _reads(self, sub_id: int, topic: str) -> bool:
        rights = self._subscribers[sub_id][0].rights
        return rights is None or rights.may_read(topic)
