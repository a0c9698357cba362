"""Persistent MQTT sessions that survive their relay: kept in Redis, resumed from the topic
dataset's log through the relay's ``every`` mode (``--mqtt-redis`` with ``--mqtt-dataset``).
Each rule in full: docs/mqtt.md, "Persistent sessions across relays".

1. A persistent session is written to Redis every ``sync`` seconds while its client is here.
2. A CONNECT with clean start off for a session not held here waits for Redis (``restored``).
3. Each QoS 1 or 2 subscription (not ``$share``) follows its dataset from the session's
   position; a row whose message the live path offered already (``MEMO``) is not sent again.
4. The position advances once everything offered is acknowledged.
5. After a restore, replayed rows go with DUP set and live messages are held back until the
   replay caught up (``CATCH_UP_WAIT`` at most): messages come in the log's order.
6. A session that ends here is deleted from Redis if this relay wrote it last.
7. QoS 2 across relays: the session is written with its QoS 2 messages in flight before each
   PUBLISH or PUBREL goes; a relay that restores it resends those, replaying none: once each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.exceptions import RedisClusterException, RedisError

from fanout import cancelling
from fanout.background import Background
from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, Update, connect
from fanout.client.viewstate import Asked, ViewState
from fanout.errors import FanoutError
from fanout.mqtt import packets as p
from fanout.mqtt.actions import Action, Restore
from fanout.mqtt.broker import Broker
from fanout.mqtt.ingest import Routes
from fanout.mqtt.logrows import retained_with_payload, rows_of
from fanout.mqtt.sessions import Session, Subscription
from fanout.mqtt.stored import Position, Record, SessionStore
from fanout.views.topic import matches
from fanout.views.topic import parse as topic_view

log = logging.getLogger(__name__)

MEMO = 10_000
CATCH_UP_WAIT = 30.0


@dataclass
class Follow:
    """One followed subscription of one session: its stream's place and the place saved."""

    client_id: str
    sub: Subscription
    dataset: str
    position: Position | None
    catching_up: bool = False
    reached: bool = False  # the stream reached the seq the relay was at (rule 5)
    saw_held: bool = False  # the log carried a message held back for the session (rule 5)
    task: asyncio.Task[None] | None = None
    memo: dict[str, deque[bytes]] = field(default_factory=dict)


def followed(sub: Subscription, routes: Routes) -> str | None:
    """The dataset ``sub`` follows (rule 3), or None: QoS 0, ``$share``, or no dataset."""
    if sub.qos < 1 or sub.filter.startswith("$share/"):
        return None
    literal = sub.filter.split("+", 1)[0].split("#", 1)[0]
    return routes.dataset(literal)


class Durable:
    """This relay's persistent sessions in Redis and their follow streams."""

    def __init__(
        self,
        store: SessionStore,
        broker: Broker,
        apply: Callable[[list[Action]], None],
        routes: Routes,
        *,
        url: Callable[[], str],
        owner: str,
        sync: float = 0.2,
        carried: Callable[[p.Publish], bool] | None = None,
    ) -> None:
        """Sessions of ``broker`` kept in ``store``; follow streams on the relay at ``url()``;
        ``carried(message)``: whether the log will carry a message published (default: the
        retained ones with a payload; ``ingest.Pending.carried``)."""
        self.store, self.broker, self.apply, self.routes = store, broker, apply, routes
        self.carried = carried or retained_with_payload
        self.url, self.owner, self.sync = url, owner, sync
        self.restored = self.replayed = self.deduplicated = self.resyncs = 0
        self._follows: dict[tuple[str, str], Follow] = {}
        #: Live copies held back per restored session, each with whether the log will carry it.
        self._held: dict[str, list[tuple[p.Publish, bool]]] = {}
        self._held_since: dict[str, float] = {}
        self._saved: dict[str, str] = {}  # client id -> the JSON last written
        self._subscriber: Subscriber | None = None
        # The restores and follow streams run in ``run``'s TaskGroup; restores asked for
        # before it opened wait for it.
        self._tasks: Background | None = None
        self._restores: list[Restore] = []
        self._locks: dict[str, asyncio.Lock] = {}  # one write of a session at a time
        #: Per restored session, the QoS 2 messages in flight or completed on the relay before
        #: (topic, payload): not replayed from the log (rule 7).
        self._skip: dict[str, Counter[tuple[str, bytes]]] = {}
        #: True while ``fromlog`` delivers a row of the log or passes a durable write at once
        #: (its rules 3 and 6): sessions following it take it from their own stream instead,
        #: at their QoS and in their log's order.
        self.feeding = False
        broker.durable = True
        broker.on_offer = self.on_offer

    # -- what the broker says -----------------------------------------------------------------

    def on_restore(self, action: Restore) -> None:
        """A CONNECT waits for its session from Redis (rule 2)."""
        if self._tasks is None:
            self._restores.append(action)
        else:
            self._tasks.start(self._restore(action))

    def on_offer(self, session: Session, message: p.Publish, copy: p.Publish) -> bool:
        """A live copy for ``session``: remember it for the log (rule 3), hold it (rule 5)."""
        if self.feeding:  # a row of the log: sessions following it take it from their streams
            return not self._following(session, message.topic)
        carried = self.carried(message)
        if carried:
            for text in session.subscriptions:
                follow = self._follows.get((session.client_id, text))
                if follow is not None and matches(text, message.topic):
                    memo = follow.memo.get(message.topic)
                    if memo is None:
                        if len(follow.memo) >= MEMO:  # bounded: the oldest topic goes
                            del follow.memo[next(iter(follow.memo))]
                        memo = follow.memo[message.topic] = deque(maxlen=MEMO)
                    memo.append(message.payload)
        held = self._held.get(session.client_id)
        if held is None:
            return True
        held.append((copy, carried))
        self._check(session.client_id)  # one the log will not carry may end the wait
        return False

    def follows(self, client_id: str, text: str) -> bool:
        """Whether session ``client_id``'s subscription ``text`` has a stream of its own."""
        return (client_id, text) in self._follows

    def _following(self, session: Session, topic: str) -> bool:
        """Whether ``session`` follows ``topic`` through a stream of its own (rule 3)."""
        return any(
            (session.client_id, text) in self._follows and matches(text, topic)
            for text in session.subscriptions
        )

    async def on_persist(self, client_id: str) -> None:
        """Write session ``client_id`` now: a QoS 2 PUBLISH or PUBREL waits for it (rule 7).

        Raises:
            RedisError: the write failed (the listener closes the connection).
        """
        session = self.broker.sessions.get(client_id)
        if session is not None:
            await self._save(session)

    # -- running ------------------------------------------------------------------------------

    async def run(self, reconnect_delay: float = 0.5) -> None:
        """Follow and save sessions until cancelled; reconnect to the relay on failures."""
        async with Background() as tasks:
            self._tasks = tasks
            for action in self._restores:
                tasks.start(self._restore(action))
            self._restores.clear()
            try:
                await self._connected(reconnect_delay)
            finally:
                self._tasks = None

    async def _connected(self, reconnect_delay: float) -> None:
        """Be connected to the relay, following and saving, again after each failure."""
        while True:
            try:
                async with connect(self.url(), name="mqtt-sessions") as subscriber:
                    self._subscriber = subscriber
                    for follow in self._follows.values():
                        self._start(follow)
                    while True:
                        cancelling.check()  # a cancel the Redis client swallowed
                        await self._sync()
                        await asyncio.sleep(self.sync)
            except (
                OSError,
                FanoutError,
                ConnectionError,
                RedisError,
                RedisClusterException,
            ) as error:
                log.warning("mqtt sessions: %s; again in %.1f s", error, reconnect_delay)
            finally:
                self._subscriber = None
                for follow in self._follows.values():
                    self._stop(follow)
            await asyncio.sleep(reconnect_delay)

    async def _restore(self, action: Restore) -> None:
        try:
            record = await self.store.load(action.client_id)
        except Exception as error:  # Redis away: the client still connects, to a new session
            log.warning("mqtt session %r not read from Redis: %s", action.client_id, error)
            record = None
        subscriptions = list(record.subscriptions) if record is not None else []
        in_flight = [
            (i, p.Publish(t, m, 2, dup=True), r)
            for i, t, m, r in (record.in_flight if record is not None else ())
        ]
        now = time.monotonic()
        self.apply(self.broker.restored(action.connection, subscriptions, now, in_flight))
        session = self.broker.sessions.get(action.client_id)
        if record is None or session is None or session.connection != action.connection:
            return
        self.restored += 1
        session.done.extend(p.Publish(t, m, 2) for t, m in record.done)
        skip = Counter((t, m) for _, t, m, _ in record.in_flight)
        skip.update(record.done)
        if skip:
            self._skip[action.client_id] = skip
        catching = False
        for sub in record.subscriptions:
            dataset = followed(sub, self.routes)
            position = record.positions.get(sub.filter)
            if dataset is None or (action.client_id, sub.filter) in self._follows:
                continue
            follow = Follow(action.client_id, sub, dataset, position, catching_up=True)
            catching = True
            self._follows[(action.client_id, sub.filter)] = follow
            self._start(follow)
        if catching:
            self._held.setdefault(action.client_id, [])
            self._held_since[action.client_id] = time.monotonic()

    async def _sync(self) -> None:
        """Start and stop follow streams as subscriptions come and go; save sessions (rule 1)."""
        wanted: set[tuple[str, str]] = set()
        for client_id, session in list(self.broker.sessions.items()):
            if session.expiry <= 0:
                continue
            for text, (_, sub) in session.subscriptions.items():
                dataset = followed(sub, self.routes)
                if dataset is None:
                    continue
                wanted.add((client_id, text))
                if (client_id, text) not in self._follows:
                    follow = Follow(client_id, sub, dataset, None)
                    self._follows[(client_id, text)] = follow
                    self._start(follow)
            if session.connection is not None:
                await self._save(session)
        for client_id, since in list(self._held_since.items()):
            if time.monotonic() - since > CATCH_UP_WAIT:  # bounded: the log may never carry them
                log.warning("mqtt session %r: catching up took too long", client_id)
                self._release(client_id)
        for key in [key for key in self._follows if key not in wanted]:
            self._stop(self._follows.pop(key))
        for client_id in [c for c in self._saved if c not in self.broker.sessions]:
            del self._saved[client_id]
            self._locks.pop(client_id, None)
            self._skip.pop(client_id, None)
            self._held.pop(client_id, None)
            self._held_since.pop(client_id, None)
            await self.store.delete(client_id, self.owner)

    async def _save(self, session: Session) -> None:
        lock = self._locks.setdefault(session.client_id, asyncio.Lock())
        async with lock:
            await self._write(session)

    async def _write(self, session: Session) -> None:
        settled = not session.in_flight and not session.queued
        positions: dict[str, Position | None] = {}
        earlier = self._saved.get(session.client_id)
        before = Record.decode(earlier).positions if earlier else {}
        for text in session.subscriptions:
            follow = self._follows.get((session.client_id, text))
            if follow is not None:
                # Rule 4: a position moves on only when everything offered is acknowledged.
                positions[text] = follow.position if settled else before.get(text)
        if settled:  # rule 7: the positions cover what the log carried
            live = {
                (t, m)
                for (c, _), f in self._follows.items()
                if c == session.client_id
                for t, memo in f.memo.items()
                for m in memo
            }
            kept = [m for m in session.done if (m.topic, m.payload) in live]
            session.done.clear()
            session.done.extend(kept)
        record = Record(
            self.owner,
            session.expiry,
            tuple(sub for _, sub in session.subscriptions.values()),
            positions,
            tuple(
                (i, m.topic, m.payload, i in session.released)
                for i, m in session.in_flight.items()
                if m.qos == 2
            ),
            tuple((m.topic, m.payload) for m in session.done),
        )
        text = record.encode()
        if text != earlier:
            await self.store.save(session.client_id, record)
            self._saved[session.client_id] = text

    # -- follow streams -----------------------------------------------------------------------

    def _start(self, follow: Follow) -> None:
        if self._subscriber is None or self._tasks is None or follow.task is not None:
            return  # started when the relay is reached
        follow.task = self._tasks.start(self._follow(follow))

    def _stop(self, follow: Follow) -> None:
        if follow.task is not None:
            follow.task.cancel()
            follow.task = None

    async def _follow(self, follow: Follow) -> None:
        subscriber = self._subscriber
        assert subscriber is not None
        view = topic_view(follow.sub.filter)
        try:
            stream = await subscriber.subscribe(
                view, follow.dataset, mode="every", resume=_earlier(subscriber, follow)
            )
            target = await self._present(subscriber, follow) if follow.catching_up else None
            if target is not None and follow.position is not None:
                self._reached(follow, follow.position.seq >= target)
            async for update in stream:
                self._take(follow, stream.key, update)
                if target is not None and follow.catching_up:
                    follow.reached = follow.reached or update.seq >= target
                    self._check(follow.client_id)
        except SubscriptionError as error:
            log.warning("mqtt session %r: %s not followed: %s", follow.client_id, view, error)
            if error.code != "closed":  # closed: followed again once the relay is reached
                self._reached(follow, True)
        except (OSError, FanoutError, ConnectionError) as error:
            log.warning("mqtt session %r: following %s: %s", follow.client_id, view, error)
        except Exception:
            log.exception("mqtt session %r: following %s failed", follow.client_id, view)
            raise

    async def _present(self, subscriber: Subscriber, follow: Follow) -> int | None:
        """The seq the relay is at for ``follow``'s view (rule 5), or None if none comes."""
        latest = await subscriber.subscribe(topic_view(follow.sub.filter), follow.dataset)
        try:
            await asyncio.wait_for(latest.wait_updates(1), CATCH_UP_WAIT)
            return latest.seq
        except TimeoutError:
            self._reached(follow, True)
            return None
        finally:
            await latest.close()

    def _take(self, follow: Follow, key: str, update: Update) -> None:
        """Offer ``update``'s rows the live path did not (rule 3); note the position."""
        before = follow.position
        topics = set() if before is None or update.full else set(before.topics)
        topics.difference_update(str(t) for t in update.left.tolist())
        for columns in (update.entered, update.updated):
            if key in columns:
                topics.update(str(t) for t in columns[key].tolist())
        rows = rows_of(update, key)
        if update.full:
            if before is not None:
                self.resyncs += 1  # away past the log's retention: what it missed is gone
                log.warning("mqtt session %r: resync of %s", follow.client_id, follow.sub.filter)
        else:
            actions: list[Action] = []
            for row in rows:
                actions += self._from_log(follow, row.topic, row.payload)
            self.apply(actions)
        follow.position = Position(update.epoch, update.seq, frozenset(topics), key)

    def _from_log(self, follow: Follow, topic: str, payload: bytes) -> list[Action]:
        client_id = follow.client_id
        skip = self._skip.get(client_id)
        if skip and skip[(topic, payload)] > 0:  # in flight or done on the relay before
            skip[(topic, payload)] -= 1
            self.deduplicated += 1
            return []
        held = self._held.get(client_id)
        memo = follow.memo.get(topic)
        if memo is not None and payload in memo:
            self.deduplicated += 1
            actions: list[Action] = []
            while memo:  # older ones were replaced in the same micro-batch
                earlier = memo.popleft()
                copy = _take_held(held, topic, earlier)
                if copy is not None:
                    follow.saw_held = True
                    actions += self.broker.offer(client_id, copy)
                if earlier == payload:
                    break
            return actions
        self.replayed += 1
        message = p.Publish(topic, payload, follow.sub.qos, dup=follow.catching_up)
        return self.broker.offer(client_id, message)

    def _reached(self, follow: Follow, done: bool) -> None:
        """``follow``'s stream reached the relay's seq (``done``); see whether it caught up."""
        if done and follow.catching_up:
            follow.reached = True
            self._check(follow.client_id)

    def _check(self, client_id: str) -> None:
        """Rule 5: a stream caught up once it reached the relay's seq and the log carried a
        message held back for it (what was published before it is then in the log too), or
        only messages the log will not carry were held; once all of a session's have, the held
        go out."""
        held = self._held.get(client_id, [])
        follows = [f for (c, _), f in self._follows.items() if c == client_id]
        for follow in follows:
            if follow.catching_up and follow.reached:
                mine = [logged for m, logged in held if matches(follow.sub.filter, m.topic)]
                follow.catching_up = not follow.saw_held and (not mine or any(mine))
        if not any(f.catching_up for f in follows):
            self._release(client_id)

    def _release(self, client_id: str) -> None:
        """Send what was held back for ``client_id``, in the order it came."""
        self._held_since.pop(client_id, None)
        for (c, _), follow in self._follows.items():
            if c == client_id:
                follow.catching_up = False
        actions: list[Action] = []
        for copy, _ in self._held.pop(client_id, []):
            actions += self.broker.offer(client_id, copy)
        self.apply(actions)

    async def close(self) -> None:
        """Stop the follow streams and restores (``run`` ending stopped them already)."""
        for follow in self._follows.values():
            self._stop(follow)
        self._restores.clear()


def _earlier(subscriber: Subscriber, follow: Follow) -> LiveView | None:
    """A view standing for ``follow``'s position, for ``Subscriber.subscribe(resume=...)``."""
    position = follow.position
    if position is None:
        return None
    state = ViewState(
        0,
        Asked(follow.dataset, topic_view(follow.sub.filter), mode="every"),
        position.key,
        [],
        rows={t: {} for t in position.topics},
        epoch=position.epoch,
        seq=position.seq,
    )
    return LiveView(state, subscriber)


def _take_held(
    held: list[tuple[p.Publish, bool]] | None, topic: str, payload: bytes
) -> p.Publish | None:
    """Remove and return the held copy of (topic, payload), if one waits (rule 5)."""
    for index, (copy, _) in enumerate(held or ()):
        if copy.topic == topic and copy.payload == payload:
            return (held or []).pop(index)[0]
    return None
