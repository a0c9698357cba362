"""An MQTT session: what the relay keeps of a client between its connections (MQTT 3.1.1 and 5.0
section 4.1). Rules:

1. A session holds the client's subscriptions, the QoS 1 messages in flight and, while the
   client is away, those queued for it; QoS 0 messages are not queued.
2. It ends with its connection under a clean session (3.1.1) or an expiry of 0 (5.0), else
   ``expiry`` seconds after (3.1.1: ``Limits.session_expiry``).
3. The queue is bounded (``Limits.max_queued``): the oldest is dropped and counted.
4. Packet identifiers are 1..65535, never one in flight [MQTT-2.2.1-3].
5. QoS 2 (4.3.3): a message sent stays in flight until PUBCOMP, released once PUBRECed; one
   received is delivered once, its identifier kept (``incoming``) until PUBREL.
6. A session kept in Redis remembers its completed QoS 2 messages (``done``, at most ``DONE``)
   until its log position covers them.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from fanout.mqtt.packets import Publish, Will
from fanout.mqtt.rights import Rights

DONE = 10_000


@dataclass(frozen=True)
class Subscription:
    """One topic filter of a session, with its SUBSCRIBE options (3.8.3.1)."""

    filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    identifier: int | None = None


@dataclass
class Session:
    """The state of one client id; ``connection`` is None while the client is away."""

    client_id: str
    version: int
    connection: int | None
    expiry: float
    will: Will | None = None
    #: A will whose Will Delay Interval runs: published at that time (monotonic) or when the
    #: session ends, whichever comes first; not if the client comes back (broker rule 3).
    delayed_will: tuple[Will, float] | None = None
    subscriptions: dict[str, tuple[int, Subscription]] = field(default_factory=dict)
    in_flight: OrderedDict[int, Publish] = field(default_factory=OrderedDict)
    queued: deque[Publish] = field(default_factory=deque)
    receive_maximum: int = 65535
    max_packet_size: int = 268_435_460
    dropped: int = 0
    away_since: float | None = None
    released: set[int] = field(default_factory=set)
    incoming: set[int] = field(default_factory=set)
    durable: bool = False
    done: deque[Publish] = field(default_factory=lambda: deque(maxlen=DONE))
    #: What its client's credentials grant (``mqtt.rights``; None: every topic), as of its
    #: last CONNECT.
    rights: Rights | None = None
    _next_id: int = 0

    def next_packet_id(self) -> int:
        """A packet identifier not in flight (rule 5); the caller holds fewer than 65,535."""
        while True:
            self._next_id = self._next_id % 65535 + 1
            if self._next_id not in self.in_flight:
                return self._next_id

    def release(self, packet_id: int) -> bool:
        """A PUBREC for ``packet_id``: whether it was in flight (now released, rule 6)."""
        if packet_id not in self.in_flight:
            return False
        self.released.add(packet_id)
        return True

    def complete(self, packet_id: int) -> None:
        """A PUBACK or PUBCOMP for ``packet_id``: it is no longer in flight (rule 7)."""
        message = self.in_flight.pop(packet_id, None)
        self.released.discard(packet_id)
        if self.durable and message is not None and message.qos == 2:
            self.done.append(message)

    def drop_unreadable(self) -> int:
        """Complete the messages in flight its ``rights`` no longer let it read (a client
        back with other credentials), before they go again; how many."""
        if self.rights is None:
            return 0
        dropped = [
            i
            for i, message in self.in_flight.items()
            if i not in self.released and not self.rights.may_read(message.topic)
        ]
        for packet_id in dropped:
            self.complete(packet_id)
        return len(dropped)

    def queue(self, message: Publish, limit: int) -> None:
        """Keep ``message`` until the client can take it, dropping the oldest past ``limit``."""
        self.queued.append(message)
        while len(self.queued) > limit:
            self.queued.popleft()
            self.dropped += 1

    def can_send(self) -> bool:
        """Whether another QoS 1 or 2 message may go out now (5.0 Receive Maximum, 3.3.4)."""
        return self.connection is not None and len(self.in_flight) < self.receive_maximum

    def expired(self, now: float) -> bool:
        """Whether the session ended while its client was away (rule 2)."""
        return self.away_since is not None and now - self.away_since >= self.expiry


#: (session, QoS, retain flag, subscription identifiers) of one session a message goes to.
Target = tuple[Session, int, bool, tuple[int, ...]]


def add_target(
    targets: dict[str, Target], session: Session, sub: Subscription, message: Publish, origin: str
) -> None:
    """Add ``session``'s matching ``sub`` to ``targets``: one copy per session (broker rule 4)."""
    if sub.no_local and session.client_id == origin:
        return
    qos = sub.qos if sub.qos < message.qos else message.qos
    retain = message.retain and sub.retain_as_published
    ids = (sub.identifier,) if sub.identifier else ()
    entry = targets.get(session.client_id)
    if entry is None:
        targets[session.client_id] = (session, qos, retain, ids)
    else:
        _, known_qos, known_retain, known_ids = entry
        targets[session.client_id] = (
            session,
            max(known_qos, qos),
            known_retain or retain,
            known_ids + ids,
        )
