"""Relays as one MQTT broker: the shared match table says which relays want a message, and the
relay a client published at forwards it to them, and to them only (docs/mqtt.md). Rules:

1. Subscriptions taken and dropped here are written to the table (``matchtable``) in order;
   lease and address are renewed every third of a lease, also for each relay this one holds an
   open link to (vouched for: ``matchtable`` rule 5), dead relays swept every lease; a relay
   swept while alive writes its table back whole at its first renewal that reaches Redis.
2. A message published here is delivered here at once, then forwarded once to every other relay
   with a matching subscription, over one connection per peer; every lease this relay dials
   each relay with subscriptions it holds no connection to (a mesh, with TCP keepalive).
3. Lookups and forwards go one at a time in publish order: order per publisher and topic holds.
4. A ``$share`` group spans the cluster: the publishing relay picks one of its relays in turn.
5. Forwarding is exactly once across a broken connection (``links``); what waited for a relay
   that died is dropped and counted (``lost``).
6. Redis away, the relay serves on: a failed beat is tried at the next, a failed step again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from fanout import cancelling
from fanout.metrics import Sample
from fanout.mqtt import packets as p
from fanout.mqtt.actions import Action
from fanout.mqtt.broker import Broker
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.durable import Durable
from fanout.mqtt.encoding import encode
from fanout.mqtt.links import Incoming, Outgoing
from fanout.mqtt.matchtable import MatchTable
from fanout.mqtt.subscribers import Plain

log = logging.getLogger(__name__)

MAX_PEER_PACKET = 256 << 20
USER = 0x26
ACK = "$fanout/ack"
#: What a call to Redis raises when it fails (redis-py's ``RedisClusterException``, not a
#: ``RedisError``, when no node answers): the beat or the step is tried again (rule 6).
REDIS_FAILURES = (RedisError, RedisClusterException, OSError, TimeoutError)
#: A peer connection idle this many seconds is probed (TCP keepalive), every second, three
#: times: a peer whose host died stops being vouched for (rule 1) within KEEPIDLE + 3 s.
KEEPIDLE = 2
#: A peer connection whose sent bytes stay unacknowledged (by the peer's kernel) this many
#: milliseconds is closed: the same with messages in flight.
USER_TIMEOUT = 15_000


def share_filter(key: str) -> str:
    """The ``$share/GROUP/filter`` text of a table's share key ``GROUP/prefix/``."""
    group, _, prefix = key.partition("/")
    return f"$share/{group}/{prefix[:-1]}"


def peer_packet(
    message: p.Publish,
    origin: str,
    plain: bool,
    shares: list[str],
    link: tuple[str, int] = ("", 0),
) -> bytes:
    """The bytes that forward ``message`` to a peer (rules 2 and 5); ``link``: the sender and
    the message's number on the link."""
    marks: list[tuple[int, object]] = [(USER, ("o", origin)), (USER, ("p", "1" if plain else "0"))]
    marks += [(USER, ("s", text)) for text in shares]
    marks += [(USER, ("r", link[0])), (USER, ("n", str(link[1])))]
    packet_id = 1 if message.qos else None
    forwarded = p.Publish(
        message.topic,
        message.payload,
        message.qos,
        message.retain,
        False,
        packet_id,
        message.properties + tuple(marks),
    )
    return encode(forwarded, p.V5)


def read_peer_packet(
    message: p.Publish,
) -> tuple[p.Publish, str, bool, list[str], tuple[str, int]]:
    """(message, origin, plain, shares, (sender, number)) of a forwarded PUBLISH
    (``peer_packet``'s inverse).

    Raises:
        PacketError: a link number that is not a number.
    """
    origin, plain, shares, sender, number = "", False, [], "", 0
    kept = []
    for ident, value in message.properties:
        if ident == USER and isinstance(value, tuple) and value[0] in ("o", "p", "s", "r", "n"):
            name, text = value
            if name == "o" and not origin:
                origin = text
            elif name == "p":
                plain = text == "1"
            elif name == "s":
                shares.append(text)
            elif name == "r":
                sender = text
            elif name == "n":
                if not text.isdigit():
                    raise p.PacketError(f"a link number {text!r:.20}", p.PROTOCOL_ERROR)
                number = int(text)
            continue
        kept.append((ident, value))
    clean = p.Publish(
        message.topic, message.payload, message.qos, message.retain, properties=tuple(kept)
    )
    return clean, origin, plain, shares, (sender, number)


def keepalive(sock: socket.socket) -> None:
    """TCP keepalive on a peer connection (``KEEPIDLE``, ``USER_TIMEOUT``): a peer whose host
    died or went away is found out, and its link closed, though nothing is sent on it."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPIDLE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT)


def _numbered(me: str, forward: tuple[p.Publish, str, bool, list[str]], number: int) -> bytes:
    """``forward`` (message, origin, plain, shares) as message ``number`` of ``me``'s link."""
    return peer_packet(*forward, link=(me, number))


class Cluster:
    """This relay's part of the cluster: the table, its peers, the forwarding queue."""

    def __init__(
        self,
        table: MatchTable,
        broker: Broker,
        apply: Callable[[list[Action]], None],
        host: str,
        peer_port: int = 0,
        *,
        advertise: str | None = None,
    ) -> None:
        """A cluster member over ``table`` whose deliveries go through ``apply``; other relays
        reach its peer port at ``advertise`` (``host:port``; None: ``host`` and the port)."""
        self.table, self.broker, self.apply = table, broker, apply
        self.host, self.peer_port, self.advertise = host, peer_port, advertise
        self.forwarded = self.received = self.lost = self.redis_failures = 0
        self._queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._peers: dict[str, asyncio.StreamWriter] = {}
        self._links: dict[str, Outgoing] = {}
        self._locks: dict[str, asyncio.Lock] = {}  # one writer of a link at a time
        self._incoming = Incoming()
        #: ``run``'s TaskGroup, which owns the readers of the peers' acknowledgements.
        self._tasks: asyncio.TaskGroup | None = None
        self._turns: dict[str, int] = {}
        self._served: set[asyncio.StreamWriter] = set()
        #: This relay's subscriptions by filter as written to the table, and one writer at a
        #: time of them: a step, or a registration after a sweep (rule 1).
        self._written: Counter[str] = Counter()
        self._writing = asyncio.Lock()
        self._dialing: set[str] = set()  # relays being dialed by the mesh (rule 2)
        #: Persistent sessions kept in Redis (``durable``), run with the cluster; None: none.
        self.durable: Durable | None = None
        #: Whether a peer's message was delivered here already, as a durable write
        #: (``fromlog.LogFeed.relayed``): then only to the shares it names.
        self.relayed: Callable[[p.Publish], bool] = lambda message: False
        self.deduplicated = 0
        broker.shared_locally = False

    # -- what the broker says -----------------------------------------------------------------

    def on_filters(self, changes: list[tuple[str, int]]) -> None:
        """Subscriptions taken (+1) or dropped (-1) here, to be written in order (rule 1)."""
        for text, delta in changes:
            self._queue.put_nowait(("filter", text, delta))

    def on_published(self, message: p.Publish, origin: str) -> None:
        """A message a client published here, to be forwarded in order (rule 3)."""
        self._queue.put_nowait(("publish", message, origin))

    # -- running ------------------------------------------------------------------------------

    async def run(self, ready: Callable[[], None] | None = None) -> None:
        """Serve peers, keep the lease, forward; until cancelled."""
        server = await asyncio.start_server(self._serve_peer, self.host, self.peer_port)
        try:
            async with server, asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self.peer_port = server.sockets[0].getsockname()[1]
                await self._renew()
                tasks.create_task(self._keep_lease())
                tasks.create_task(self._work())
                if self.durable is not None:
                    tasks.create_task(self.durable.run())
                if ready is not None:
                    ready()
        except Exception:
            log.exception("mqtt cluster: stopped")
            raise
        finally:
            for writer in self._peers.values():
                writer.transport.abort()
            self._tasks = None  # its acknowledgement readers ended with it
            for writer in self._served:
                writer.transport.abort()
            if self.durable is not None:
                await self.durable.close()
            await self.table.redis.aclose()

    @property
    def _registered(self) -> int:
        """Subscriptions of this relay in the table."""
        return self._written.total()

    async def _renew(self) -> None:
        table = self.table
        await table.renew()
        await table.advertise(self.advertise or f"{self.host}:{self.peer_port}")
        if self._written.total() and not await table.registered():
            async with self._writing:  # what was written, not what waits in the queue
                # Swept while alive (cut from Redis or stalled, and no relay linked to it
                # vouched for it): its filters, whole, not queued behind steps (rule 1).
                await table.register(self._written)
            log.warning("mqtt cluster: %s was swept while alive; registered again", table.relay)

    async def _keep_lease(self) -> None:
        beats = 0
        while True:
            cancelling.check()  # a cancel the Redis client swallowed
            await asyncio.sleep(self.table.lease / 3)
            beats += 1
            try:
                await self._beat(sweep=beats % 3 == 0)
            except REDIS_FAILURES as error:  # rule 6: the next beat tries again
                self.redis_failures += 1
                log.warning("mqtt cluster: a beat failed, trying again: %r", error)

    async def _beat(self, sweep: bool) -> None:
        await self._renew()
        await self.table.vouch(self._linked())
        for relay in [r for r, link in self._links.items() if link.unacked]:
            await self._flush(relay)  # a broken link is opened again (rule 5)
        if sweep:
            self._mesh(await self.table.relays())
            for relay in await self.table.sweep(self._linked()):
                log.info("mqtt cluster: swept relay %s (lease expired)", relay)
        await self.table.follow_invalidations()

    def _mesh(self, relays: set[str]) -> None:
        """Dial, in the background, every relay of ``relays`` not linked from here (rule 2)."""
        cancelling.check()  # a cancel the Redis client swallowed: the task group is closing
        linked = set(self._linked())
        assert self._tasks is not None, "the mesh is dialed only while run() runs"
        for relay in sorted(relays - linked - self._dialing - {self.table.relay}):
            self._dialing.add(relay)
            self._links.setdefault(relay, Outgoing())
            self._tasks.create_task(self._dial(relay))

    async def _dial(self, relay: str) -> None:
        try:
            await self._flush(relay)
        finally:
            self._dialing.discard(relay)

    async def _work(self) -> None:
        while True:
            cancelling.check()  # a cancel the Redis client swallowed
            item = await self._queue.get()
            while True:  # rule 6: the step, and every one queued behind it, waits for Redis
                try:
                    await self._step(item)
                    break
                except REDIS_FAILURES as error:
                    self.redis_failures += 1
                    log.warning("mqtt cluster: Redis failed, trying again: %r", error)
                    await asyncio.sleep(self.table.lease / 3)

    async def _step(self, item: tuple[Any, ...]) -> None:
        """Write a filter change or forward a message; a Redis failure leaves nothing done
        but a filter change's own writes (``_flush`` keeps its own failures)."""
        if item[0] == "filter":
            _, text, delta = item
            async with self._writing:
                await (self.table.add(text) if delta > 0 else self.table.remove(text))
                self._written[text] += delta
                if not self._written[text]:
                    del self._written[text]
        else:
            _, message, origin = item
            await self._forward(message, origin)

    def samples(self) -> list[Sample]:
        """The cluster's figures for ``GET /metrics``."""
        return [
            Sample(f"relay_mqtt_cluster_{name}_total", "counter", text, value)
            for name, text, value in (
                ("forwarded", "Messages forwarded to other relays of the cluster.", self.forwarded),
                ("received", "Messages other relays forwarded here, delivered.", self.received),
                ("lost", "Forwarded messages dropped: their relay died first.", self.lost),
                (
                    "deduplicated",
                    "Messages forwarded here that reached its clients first as a durable write"
                    " (then only to the shared subscriptions named).",
                    self.deduplicated,
                ),
                (
                    "redis_failures",
                    "Calls to Redis that failed (each tried again; MQTT kept serving).",
                    self.redis_failures,
                ),
            )
        ] + [
            Sample(
                "relay_mqtt_cluster_peers",
                "gauge",
                "Relays of the cluster this one holds a connection to, and vouches for.",
                len(self._linked()),
            )
        ]

    async def _forward(self, message: p.Publish, origin: str) -> None:
        # A relay this one holds a connection to is alive, whatever its lease says: one that
        # stalled past its lease (a loaded host) still reads what is forwarded to it.
        matches = await self.table.match(message.topic, self._linked())
        me = self.table.relay
        targets: dict[str, tuple[bool, list[str]]] = {
            relay: (True, []) for relay in matches.relays if relay != me
        }
        local: list[str] = []
        for key, members in sorted(matches.shared.items()):
            ordered = sorted(members)
            turn = self._turns.get(key, 0)
            self._turns[key] = turn + 1
            chosen = ordered[turn % len(ordered)]
            if chosen == me:
                local.append(share_filter(key))
            else:
                targets.setdefault(chosen, (False, []))[1].append(share_filter(key))
        if local:
            self.apply(self.broker.publish(message, origin, plain=False, shares=local))
        for relay, (plain, shares) in sorted(targets.items()):
            link = self._links.setdefault(relay, Outgoing())
            link.add(functools.partial(_numbered, me, (message, origin, plain, shares)))
            self.forwarded += 1
            await self._flush(relay)

    def _linked(self) -> list[str]:
        """The relays this one holds an open connection to: alive, whatever their lease says."""
        return [relay for relay, writer in self._peers.items() if not writer.is_closing()]

    async def _flush(self, relay: str) -> None:
        """Write what ``relay``'s link has not written yet, (re)connecting first (rule 5)."""
        link = self._links[relay]
        async with self._locks.setdefault(relay, asyncio.Lock()):
            writer = self._peers.get(relay)
            try:
                if writer is None or writer.is_closing():
                    writer = await self._connect(relay, link)
                    if writer is None:
                        return
                for data in link.to_write():
                    writer.write(data)
                await writer.drain()
            except REDIS_FAILURES as error:  # the peer's address unread, or its connection
                if writer is not None:
                    writer.transport.abort()
                self._peers.pop(relay, None)
                log.warning("mqtt cluster: forwarding to %s: %r; sent again later", relay, error)

    async def _connect(self, relay: str, link: Outgoing) -> asyncio.StreamWriter | None:
        """A new connection to ``relay`` (None: it is gone, and what waited for it is lost)."""
        address = await self.table.redis.get(self.table.address_key(relay))
        if address is None:  # its address ran out, leases after its lease: it died
            self.lost += link.drop()  # the link is kept: its numbers go on (links rule 1)
            return None
        host, _, port = address.decode().rpartition(":")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        try:
            keepalive(writer.get_extra_info("socket"))
        except OSError:  # it closed already: dialed again later
            writer.transport.abort()
            raise
        self._peers[relay] = writer
        link.reconnected()
        assert self._tasks is not None, "links are connected only while run() runs"
        self._tasks.create_task(self._read_acks(relay, reader, writer))
        return writer

    async def _read_acks(
        self, relay: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Take ``relay``'s acknowledgements until the connection ends (rule 5)."""
        buffer = bytearray()
        try:
            while data := await reader.read(65536):
                buffer += data
                while found := split(buffer, MAX_PEER_PACKET):
                    first, body, taken = found
                    del buffer[:taken]
                    packet = decode(first, body, p.V5)
                    link = self._links.get(relay)
                    if isinstance(packet, p.Publish) and packet.topic == ACK and link:
                        link.ack(int(packet.payload))
        except (OSError, ValueError, p.PacketError) as error:
            log.warning("mqtt cluster: the link to %s: %s", relay, error)
        else:  # a connection killed may end with a reset or with an end of file
            log.warning("mqtt cluster: the link to %s was closed at its other end", relay)
        finally:
            writer.transport.abort()  # written again on a new connection

    def _deliver(
        self, message: p.Publish, origin: str, plain: bool, shares: Collection[str] | None
    ) -> list[Action]:
        """A peer's message to this relay's clients. One passed here already as a durable write
        (``fromlog`` rule 6) goes to its shares and to the persistent sessions following its
        topic alone: they take their messages from the peers and their own streams, never
        from that copy."""
        keep: Plain = plain
        if plain and self.relayed(message):
            self.deduplicated += 1
            keep = False if self.durable is None else self.durable.follows
        now = time.monotonic()  # its expiry starts here (broker rule 9)
        return self.broker.publish(message, origin, plain=keep, shares=shares, now=now)

    async def _serve_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = bytearray()
        sender = ""
        self._served.add(writer)
        try:
            keepalive(writer.get_extra_info("socket"))  # a sender that died is found out
            while data := await reader.read(65536):
                buffer += data
                while found := split(buffer, MAX_PEER_PACKET):
                    first, body, taken = found
                    del buffer[:taken]
                    packet = decode(first, body, p.V5)
                    if not isinstance(packet, p.Publish):
                        raise p.PacketError("a peer sends only PUBLISH", p.PROTOCOL_ERROR)
                    message, origin, plain, shares, (sender, number) = read_peer_packet(packet)
                    if not sender or self._incoming.accept(sender, number):
                        self.received += 1
                        self.apply(self._deliver(message, origin, plain, shares))
                if sender:  # rule 5: the last delivered, after each read
                    ack = p.Publish(ACK, str(self._incoming.last.get(sender, 0)).encode())
                    writer.write(encode(ack, p.V5))
        except (OSError, p.PacketError) as error:
            log.warning("mqtt cluster: a peer connection failed: %s", error)
        finally:
            self._served.discard(writer)
            writer.close()
