"""The relay's MQTT broker: packets in, packets out, no sockets and no clock inside.

``mqtt.listener`` feeds each connection's bytes to :meth:`Broker.receive` with the time and
carries out what comes back (``Send``, ``Close``, ``Published``). The rules it keeps (MQTT 3.1.1
and 5.0), numbered as the code cites them, are in docs/mqtt.md, "The broker's rules";
``mqtt.subscribing`` answers SUBSCRIBE and UNSUBSCRIBE, ``mqtt.outgoing`` makes a message ready
for one session.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from fanout.mqtt import packets as p
from fanout.mqtt.access import NOT_AUTHORIZED, Admitted, Verdict
from fanout.mqtt.actions import (
    Action,
    Authenticate,
    Close,
    Limits,
    Persist,
    Published,
    Restore,
    Send,
)
from fanout.mqtt.connecting import connack, refusal, session_expiry
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.denials import Denials, refused_connack
from fanout.mqtt.encoding import encode
from fanout.mqtt.incoming import take_publish
from fanout.mqtt.outgoing import Encoded, Withheld, copy_for, fan_out, is_sys, outgoing
from fanout.mqtt.rights import Rights
from fanout.mqtt.sessions import Session, Subscription
from fanout.mqtt.subscribers import Plain, Subscribers
from fanout.mqtt.subscribing import retained_for, subscribe, unsubscribe


@dataclass
class _Connection:
    buffer: bytearray
    last_seen: float
    session: Session | None = None
    version: int = p.V5  # until the CONNECT says: errors before it are answered as 5.0
    keepalive: int = 0
    packets: int = 0
    parked: p.Connect | None = None  # waiting for its session from Redis (``Restore``)
    admitted: bool = False  # its credentials passed (rule 11)
    rights: Rights | None = None  # what they grant (None: every topic)
    expires: float | None = None  # when they end (a token's ``exp``)


class Broker:
    """Sessions, subscriptions and retained messages of one relay's MQTT clients."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.retained: dict[str, p.Publish] = {}
        self.sessions: dict[str, Session] = {}
        self.refused = 0  # connections closed for bad input
        self.packets_in = 0  # packets read from every connection (``mqtt.introspection``)
        self.expired = 0  # messages not sent to a session: their expiry passed (rule 9)
        self._now = 0.0  # the time of the last event: messages are stamped with it (rule 9)
        #: Set by the listener when it checks access (rule 11): a CONNECT waits for ``admitted``.
        self.gated = False
        self.denials = Denials()
        self._connections: dict[int, _Connection] = {}
        self.subscribers = Subscribers()  # every session's, matched by topic
        #: False in a cluster: the cluster chooses which relay serves a share group.
        self.shared_locally = True
        self._assigned = itertools.count(1)
        #: Set by ``durable`` (sessions kept in Redis): a CONNECT resuming a session this relay
        #: does not hold waits for ``restored``; ``on_offer(session, message, copy)`` hears each
        #: live copy for a session, and holds it back by returning False.
        self.durable = False
        self.on_offer: Callable[[Session, p.Publish, p.Publish], bool] | None = None
        #: Hears every message delivered here (``fromlog``: the log does not send it again).
        self.on_deliver: Callable[[p.Publish], None] | None = None

    # -- connections -----------------------------------------------------------------------

    def opened(self, connection: int, now: float) -> None:
        """A client connected (its CONNECT is still to come)."""
        self._now = now
        self._connections[connection] = _Connection(bytearray(), now)

    def receive(self, connection: int, data: bytes, now: float) -> list[Action]:
        """Take bytes read from ``connection`` and answer every whole packet among them."""
        state = self._connections.get(connection)
        if state is None:
            return []
        state.buffer += data
        state.last_seen = self._now = now
        actions: list[Action] = []
        if state.parked is not None and len(state.buffer) > self.limits.max_packet:
            return self._refuse(connection, state, p.QUOTA_EXCEEDED, "too much sent before CONNACK")
        while connection in self._connections and state.parked is None:
            try:
                found = split(state.buffer, self.limits.max_packet)
                if found is None:
                    break
                first, body, taken = found
                del state.buffer[:taken]
                state.packets += 1
                self.packets_in += 1
                packet = decode(first, body, state.version)
                p.check_values(packet)
                actions += self._handle(connection, state, packet, now)
            except p.PacketError as error:
                actions += self._refuse(connection, state, error.code, str(error))
        return actions

    def restored(
        self,
        connection: int,
        subscriptions: list[Subscription],
        now: float,
        in_flight: Collection[tuple[int, p.Publish, bool]] = (),
    ) -> list[Action]:
        """Answer a CONNECT parked by ``Restore``: its session comes back with
        ``subscriptions`` (none: a new session) and its QoS 2 messages ``in_flight`` (packet
        identifier, message, PUBRECed), sent again; then the packets read meanwhile are handled."""
        state = self._connections.get(connection)
        if state is None or state.parked is None:
            return []
        self._now = now
        packet, state.parked = state.parked, None
        if (subscriptions or in_flight) and packet.client_id not in self.sessions:
            session = Session(packet.client_id, packet.version, None, 0.0, away_since=now)
            self.sessions[packet.client_id] = session
            for subscription in subscriptions:
                self.subscribers.install(session, subscription)
            for packet_id, message, released in in_flight:
                session.in_flight[packet_id] = replace(message, packet_id=packet_id)
                if released:
                    session.released.add(packet_id)
        actions = self._connect(connection, state, packet, now, park=False)
        return actions + self.receive(connection, b"", now)

    def admitted(self, connection: int, verdict: Verdict, now: float) -> list[Action]:
        """Answer a CONNECT parked by ``Authenticate`` with ``verdict`` (rule 11): refused, a
        CONNACK saying why and the close; admitted, as any CONNECT, then the packets read
        meanwhile."""
        state = self._connections.get(connection)
        if state is None or state.parked is None:
            return []
        packet, state.parked = state.parked, None
        if not isinstance(verdict, Admitted):
            self.denials.logins[verdict.reason] += 1
            del self._connections[connection]  # nothing more is read from it
            data = refused_connack(verdict, packet.version)
            return [Send(connection, data), Close(connection, verdict.why)]
        state.admitted, state.rights = True, verdict.rights
        state.expires = None if verdict.lifetime is None else now + verdict.lifetime
        return self._connect(connection, state, packet, now) + self.receive(connection, b"", now)

    def offer(self, client_id: str, message: p.Publish) -> list[Action]:
        """Deliver ``message`` to session ``client_id`` alone (a replay from the log), if held."""
        session = self.sessions.get(client_id)
        actions: list[Action] = []
        if session is not None:
            self._offer(session, message, None, actions)
        return actions

    def packets(self, connection: int) -> int:
        """Packets read from ``connection`` so far (the shell throttles on them)."""
        state = self._connections.get(connection)
        return 0 if state is None else state.packets

    def client(self, connection: int) -> tuple[Session, int] | None:
        """The session on ``connection`` and its keep alive, once connected."""
        state = self._connections.get(connection)
        return None if state is None or state.session is None else (state.session, state.keepalive)

    def lost(self, connection: int, now: float) -> list[Action]:
        """The connection closed without a DISCONNECT (or was closed): publish its will."""
        state = self._connections.pop(connection, None)
        if state is None or state.session is None:
            return []
        self._now = max(self._now, now)
        session = state.session
        will, session.will = session.will, None
        actions = self._leave(session, now)
        if will is None:
            return actions
        delay = p.prop(will.properties, 0x18, 0)
        if isinstance(delay, int) and delay > 0 and self.sessions.get(session.client_id) is session:
            session.delayed_will = (will, now + delay)  # rule 3: ``tick`` or the session's end
            return actions
        return actions + self._publish_will(session, will)

    def _publish_will(self, session: Session, will: p.Will) -> list[Action]:
        """Publish ``will`` without its Will Delay Interval, a CONNECT property only (rule 3)."""
        if is_sys(will.topic):  # rule 11: not a client's to write
            self.denials.publish += 1
            return []
        properties = tuple((k, v) for k, v in will.properties if k != 0x18)
        message = p.Publish(will.topic, will.payload, will.qos, will.retain, properties=properties)
        return self._publish(message, session.client_id)

    def tick(self, now: float) -> list[Action]:
        """Close connections past their keep alive (rule 8), drop sessions that expired and
        publish the wills whose delay passed or whose session ended (rule 3)."""
        self._now = now
        actions: list[Action] = []
        for connection, state in list(self._connections.items()):
            limit = state.keepalive * 1.5
            if state.keepalive and now - state.last_seen > limit:
                actions += self._refuse(connection, state, p.KEEP_ALIVE_TIMEOUT, "keep alive")
            elif state.expires is not None and now >= state.expires:
                self.denials.expired += 1
                actions += self._refuse(connection, state, NOT_AUTHORIZED, "the token expired")
        for session in list(self.sessions.values()):
            if session.connection is not None:
                continue
            ended = session.expired(now)
            if ended:
                self._end(session)
            due = session.delayed_will
            if due is not None and (ended or now >= due[1]):
                session.delayed_will = None
                actions += self._publish_will(session, due[0])
        return actions

    # -- packets ---------------------------------------------------------------------------

    def _handle(
        self, connection: int, state: _Connection, packet: p.Packet, now: float
    ) -> list[Action]:
        if state.session is None:
            return self._first(connection, state, packet, now)
        session = state.session
        match packet:
            case p.Publish():
                actions = self._client_publish(connection, session, packet)
            case p.PubAck() | p.PubComp():
                session.complete(packet.packet_id)
                actions = self._drain(session)
            case p.PubRec():
                actions = self._pubrec(connection, session, packet)
            case p.PubRel():
                known = packet.packet_id in session.incoming
                session.incoming.discard(packet.packet_id)
                code = p.SUCCESS if known or session.version != p.V5 else p.PACKET_ID_NOT_FOUND
                done = p.PubComp(packet.packet_id, code)
                actions = [Send(connection, encode(done, session.version))]
            case p.Subscribe():
                actions = self._subscribe(connection, session, packet)
            case p.Unsubscribe():
                ack = unsubscribe(session, packet, self.subscribers)
                actions = [Send(connection, encode(ack, session.version))]
            case p.PingReq():
                actions = [Send(connection, encode(p.PingResp(), session.version))]
            case p.Disconnect():
                actions = self._disconnect(connection, state, packet, now)
            case p.Connect():
                raise p.PacketError("a second CONNECT [MQTT-3.1.0-2]", p.PROTOCOL_ERROR)
            case _:
                name = type(packet).__name__
                raise p.PacketError(f"{name} is not sent to a server", p.PROTOCOL_ERROR)
        return actions

    def _first(
        self, connection: int, state: _Connection, packet: p.Packet, now: float
    ) -> list[Action]:
        """A connection's first packet: a CONNECT (rules 1 and 7)."""
        if not isinstance(packet, p.Connect):
            raise p.PacketError("the first packet must be CONNECT [MQTT-3.1.0-1]", p.PROTOCOL_ERROR)
        if p.prop(packet.properties, 0x15) is not None:  # no AUTH exchange here
            ack = encode(p.ConnAck(False, p.BAD_AUTHENTICATION_METHOD), p.V5)
            return [Send(connection, ack), Close(connection, "enhanced authentication")]
        return self._connect(connection, state, packet, now)

    def _connect(
        self, connection: int, state: _Connection, packet: p.Connect, now: float, park: bool = True
    ) -> list[Action]:
        state.version, state.keepalive = packet.version, packet.keepalive
        if self.gated and not state.admitted:
            state.parked = packet  # ``admitted`` goes on
            return [Authenticate(connection, packet)]
        client_id, assigned = packet.client_id, None
        if not client_id:
            if packet.version != p.V5 and not packet.clean_start:
                ack = p.ConnAck(False, 0x02)  # 3.1.1: identifier rejected [MQTT-3.1.3-8]
                return [
                    Send(connection, encode(ack, state.version)),
                    Close(connection, "empty client id with a persistent session"),
                ]
            client_id = assigned = f"fanout-{next(self._assigned)}-{connection}"
        if park and self.durable and not packet.clean_start and client_id not in self.sessions:
            state.parked = packet  # its session may be in Redis: ``restored`` goes on
            return [Restore(connection, client_id)]
        actions: list[Action] = []
        old = self.sessions.get(client_id)
        if old is not None and old.connection is not None:
            actions += self._take_over(old, now)
        if old is not None:
            actions += self._returning(old, packet.clean_start)
            old = None if packet.clean_start else old
        expiry = session_expiry(packet, self.limits)
        if old is None:
            session = Session(client_id, packet.version, connection, expiry)
            self.sessions[client_id] = session
        else:
            session = old
            session.version, session.connection, session.expiry = packet.version, connection, expiry
            session.away_since = None
        session.will = packet.will
        session.durable = self.durable and expiry > 0
        session.receive_maximum = int(p.prop(packet.properties, 0x21, 65535))  # type: ignore[call-overload]
        session.max_packet_size = int(p.prop(packet.properties, 0x27, 268_435_460))  # type: ignore[call-overload]
        state.session, session.rights = session, state.rights
        ack = connack(packet, old is not None, assigned, expiry, self.limits)
        actions.append(Send(connection, encode(ack, session.version)))
        return actions + self._resume(session)

    def _returning(self, old: Session, clean_start: bool) -> list[Action]:
        """A CONNECT for ``old``'s client id: its delayed will is not sent, unless clean start
        ends the session (rule 3)."""
        delayed, old.delayed_will = old.delayed_will, None
        if not clean_start:
            return []
        self._end(old)
        return [] if delayed is None else self._publish_will(old, delayed[0])

    def _take_over(self, old: Session, now: float) -> list[Action]:
        connection = old.connection
        assert connection is not None
        actions: list[Action] = []
        if old.version == p.V5:
            data = encode(p.Disconnect(p.SESSION_TAKEN_OVER), p.V5)
            actions.append(Send(connection, data))
        actions.append(Close(connection, "session taken over"))
        return actions + self.lost(connection, now)

    def _resume(self, session: Session) -> list[Action]:
        """Send what a returning session missed: in-flight messages again, then the queue."""
        connection = session.connection
        assert connection is not None
        self.denials.withheld += session.drop_unreadable()  # rule 11
        actions: list[Action] = [
            Send(connection, encode(p.PubRel(i), session.version))
            if i in session.released
            else Send(connection, encode(replace(message, dup=True), session.version))
            for i, message in session.in_flight.items()
        ]
        return actions + self._drain(session)

    def _drain(self, session: Session) -> list[Action]:
        actions: list[Action] = []
        while session.queued and session.can_send():
            self._send(session, session.queued.popleft(), None, actions)
        return actions

    def _pubrec(self, connection: int, session: Session, packet: p.PubRec) -> list[Action]:
        if packet.code >= 0x80:  # the client refused it: it is done with
            session.complete(packet.packet_id)
            return self._drain(session)
        known = session.release(packet.packet_id)
        code = p.SUCCESS if known or session.version != p.V5 else p.PACKET_ID_NOT_FOUND
        data = encode(p.PubRel(packet.packet_id, code), session.version)
        persist = [Persist(connection, session.client_id)] if known and session.durable else []
        return [*persist, Send(connection, data)]

    def _client_publish(self, connection: int, session: Session, packet: p.Publish) -> list[Action]:
        taken = take_publish(session, packet, self.limits)
        self.denials.publish += taken.refused
        actions: list[Action] = [Send(connection, data) for data in taken.answers]
        if taken.message is None:
            return actions
        return actions + self._publish(taken.message, session.client_id)

    def publish(
        self,
        message: p.Publish,
        origin: str = "",
        *,
        plain: Plain = True,
        shares: Collection[str] | None = None,
        now: float | None = None,
    ) -> list[Action]:
        """Deliver ``message`` from elsewhere (another relay) to this relay's clients.

        Args:
            message: the message.
            origin: the client id that published it (for No Local).
            plain: deliver it to the matching plain subscriptions (a callable: those it keeps).
            shares: the shared subscriptions (``$share/GROUP/filter`` texts) this relay was
                chosen to deliver it to one member of; None: every matching one.
            now: when it came (its Message Expiry Interval starts then); None: the last event's.
        """
        self._now = self._now if now is None else now
        return self._deliver(message, origin, plain, shares)

    def _publish(self, message: p.Publish, client_id: str) -> list[Action]:
        # In a cluster, which relay serves a share group is the cluster's choice (rule 4).
        shares = None if self.shared_locally else ()
        return [Published(message, client_id), *self._deliver(message, client_id, True, shares)]

    def take_filter_changes(self) -> list[tuple[str, int]]:
        """(filter, +1 or -1) for every subscription added or removed since the last call."""
        return self.subscribers.take_changes()

    def _deliver(
        self, message: p.Publish, origin: str, plain: Plain, shares: Collection[str] | None
    ) -> list[Action]:
        if self.on_deliver is not None:
            self.on_deliver(message)
        interval = p.prop(message.properties, 0x02)
        if message.expires is None and isinstance(interval, int):
            message = replace(message, expires=self._now + interval)  # rule 9
        if message.retain and message.payload:
            self.retained[message.topic] = message
        elif message.retain:
            self.retained.pop(message.topic, None)
        actions: list[Action] = []
        shared: Encoded = {}
        offered, targets = self.on_offer, self.subscribers.targets(message, origin, plain, shares)
        if offered is None and not message.qos and message.expires is None:  # most fan-outs
            self.denials.withheld += fan_out(message, targets, shared, actions)
            return actions
        for session, qos, retain, identifiers in targets:
            copy = copy_for(message, qos, retain, identifiers)
            if offered is None or offered(session, message, copy):
                self._offer(session, copy, shared, actions)
        return actions

    def _offer(
        self, session: Session, message: p.Publish, shared: Encoded | None, out: list[Action]
    ) -> None:
        """Send ``message`` to ``session`` now (``shared``: ``outgoing``'s), or queue it."""
        if session.connection is None or (message.qos and not session.can_send()):
            if message.qos:
                session.queue(message, self.limits.max_queued)
            return
        self._send(session, message, shared, out)

    def _send(
        self, session: Session, message: p.Publish, shared: Encoded | None, out: list[Action]
    ) -> None:
        """Append to ``out`` what sends ``message`` to ``session``'s connection, unless withheld."""
        assert session.connection is not None
        ready = outgoing(session, message, self._now, shared)
        if ready is Withheld.UNREADABLE:
            self.denials.withheld += 1
        elif ready is Withheld.EXPIRED:
            self.expired += 1
        if isinstance(ready, Withheld):
            return
        message, data = ready
        if message.qos == 2 and session.durable:
            out.append(Persist(session.connection, session.client_id))
        out.append(Send(session.connection, data))

    def _subscribe(self, connection: int, session: Session, packet: p.Subscribe) -> list[Action]:
        done = subscribe(session, packet, self.subscribers, self.limits, self.denials)
        actions: list[Action] = [Send(connection, encode(done.ack, session.version))]
        for topic_filter, qos in done.retained:
            for message in retained_for(self.retained, topic_filter, qos, self._now):
                self._offer(session, message, None, actions)
        return actions

    def _disconnect(
        self, connection: int, state: _Connection, packet: p.Disconnect, now: float
    ) -> list[Action]:
        session = state.session
        assert session is not None
        expiry = p.prop(packet.properties, 0x11)
        if isinstance(expiry, int):
            if session.expiry == 0 and expiry:
                raise p.PacketError(
                    "session expiry set at DISCONNECT after 0 [MQTT-3.14.2-2]", p.PROTOCOL_ERROR
                )
            session.expiry = min(expiry, self.limits.session_expiry)
        if packet.code != 0x04:  # "Disconnect with Will Message" keeps it
            session.will = None
        return [Close(connection, "client disconnected"), *self.lost(connection, now)]

    def _refuse(self, connection: int, state: _Connection, code: int, why: str) -> list[Action]:
        """Rule 7: tell the client why where it can be told (``connecting.refusal``), then close."""
        self.refused += 1
        told = [Send(connection, data) for data in refusal(state.version, state.session, code, why)]
        since = 0.0 if state.session is None else state.last_seen
        return [*told, Close(connection, why), *self.lost(connection, since)]

    # -- sessions --------------------------------------------------------------------------

    def _leave(self, session: Session, now: float) -> list[Action]:
        session.connection = None
        if session.expiry <= 0:
            self._end(session)
        else:
            session.away_since = now
        return []

    def _end(self, session: Session) -> None:
        self.subscribers.remove_all(session)
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
