"""Messages of a topic dataset's other producers to MQTT clients: the relay reads the dataset's
log, and sends what the live path did not carry (docs/mqtt.md). Rules:

1. One ``every`` subscription of ``#`` a topic dataset on the relay's own port, from its start.
2. A message delivered live that the log will carry is remembered by topic (bounded by ``MEMO``)
   until its row comes: that row, and older ones of its topic, are not delivered again (one
   whose row comes later after all is: at least once, ending in the log's order).
3. Any other row goes to this relay's clients at QoS 1 (retained rows retained), to plain
   subscriptions, to ``$share`` groups only on a relay alone; sessions following the topic
   through ``durable`` take it from there. 4. A deleted row removes the topic's retained message.
5. A stream's first push (the dataset as it is) delivers nothing.
6. A durable write from the live path (``written``, asked of the datasets a subscription could
   take: ``wanted``) goes at once as rule 3 says, unless delivered live or a plain QoS 2
   subscription matches its topic (a row has no QoS: the peer's copy or the log serves it);
   remembered as rule 2 says, and as passed until its row comes: a peer's copy is then not.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import numpy as np

from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, Update, connect
from fanout.errors import FanoutError
from fanout.mqtt import packets as p
from fanout.mqtt.actions import Action
from fanout.mqtt.broker import Broker
from fanout.mqtt.durable import Durable
from fanout.mqtt.ingest import Routes, is_message_key
from fanout.mqtt.logrows import retained_with_payload, rows_of
from fanout.views.topic import parse as topic_view
from fanout.wire.columns import Columns, decode_columns

log = logging.getLogger(__name__)

MEMO = 10_000


class LogFeed:
    """Follows the routed topic datasets and delivers their other producers' rows."""

    def __init__(
        self,
        broker: Broker,
        apply: Callable[[list[Action]], None],
        routes: Routes,
        url: Callable[[], str],
        *,
        shared: bool = True,
        carried: Callable[[p.Publish], bool] | None = None,
    ) -> None:
        """Rows for ``broker``'s clients, through ``apply``; ``shared``: to ``$share`` groups;
        ``carried(message)``: whether the log will carry a message delivered live (default:
        the retained ones with a payload; ``ingest.Pending.carried``)."""
        self.broker, self.apply, self.routes, self.url = broker, apply, routes, url
        self.shared = shared
        self.carried = carried or retained_with_payload
        self.delivered = self.deduplicated = 0
        self.passed = 0  # durable writes delivered at once (rule 6)
        self.held_back = 0  # durable writes left to a peer's copy or the log (rule 6)
        self.keys: dict[str, str] = {}  # each followed dataset's key column
        #: The persistent sessions, which follow their own subscriptions (rule 3).
        self.durable: Durable | None = None
        self._memo: dict[str, deque[bytes]] = {}
        self._passed: dict[str, deque[bytes]] = {}  # rule 6
        self._feeding = False
        broker.on_deliver = self.on_deliver

    def on_deliver(self, message: p.Publish) -> None:
        """A message the broker delivers: remembered if the log will carry it (rule 2)."""
        if not self._feeding and self.carried(message):
            _remember(self._memo, message.topic, message.payload)

    def relayed(self, message: p.Publish) -> bool:
        """A peer relay's copy of a message for the plain subscriptions: whether ``written``
        delivered it here already (rule 6; then the copy is not delivered again)."""
        return _forget(self._passed, message.topic, message.payload)

    def wanted(self) -> set[str]:
        """The routed datasets a durable write of which some subscription here could take
        (rule 6, what the relay asks to be passed): by every session's filters, persistent
        ones away too, ``$share`` ones if they take rows here. A write of another dataset is
        delivered by the log all the same (rule 3), later."""
        routed, found = set(self.routes.datasets()), set()
        for text in self.broker.subscribers.filters():
            if self.shared or not text.startswith("$share/"):
                found |= self.routes.reachable(text)
                if found >= routed:
                    break
        return found & routed

    def written(self, dataset: str, upserts: Columns) -> None:
        """A durable write of ``dataset`` (rule 6), its rows ``upserts``."""
        if dataset not in self.routes.datasets():
            return
        key, columns = self.keys.get(dataset), decode_columns(upserts)
        if key is None or not columns:
            return  # not followed yet: the log delivers it
        update = Update(0, 0, 0, 0, False, columns, {}, np.empty(0, object), 0.0, 0.0)
        actions: list[Action] = []
        for row in rows_of(update, key):
            _forget(self._passed, row.topic, row.payload)  # a copy relayed later is news
            memo = self._memo.get(row.topic)
            if memo is not None and row.payload in memo:
                continue  # delivered live here already: the log dedups both copies as one
            if self.broker.subscribers.highest_qos(row.topic, self._plain) == 2:
                self.held_back += 1
                continue
            self.passed += 1
            _remember(self._passed, row.topic, row.payload)
            message = p.Publish(row.topic, row.payload, 1, retain=row.retain)
            actions += self._publish(message, remembered=True)
        self.apply(actions)

    def _plain(self, client_id: str, text: str) -> bool:
        """Whether a subscription takes a row here as a plain one: not followed (rule 3)."""
        return self.durable is None or not self.durable.follows(client_id, text)

    def take(self, key: str, update: Update) -> list[Action]:
        """What ``update`` of a followed dataset sends to the clients (rules 2-5)."""
        if update.full:
            return []
        for topic in update.left.tolist():
            if not is_message_key(str(topic)):
                self.broker.retained.pop(str(topic), None)
        actions: list[Action] = []
        for row in rows_of(update, key):
            _forget(self._passed, row.topic, row.payload)  # a copy relayed later is news
            memo = self._memo.get(row.topic)
            if memo is not None and row.payload in memo:
                self.deduplicated += 1
                while memo.popleft() != row.payload:
                    pass
                if not memo:
                    del self._memo[row.topic]
                continue
            self.delivered += 1
            actions += self._publish(p.Publish(row.topic, row.payload, 1, retain=row.retain))
        return actions

    def _publish(self, message: p.Publish, *, remembered: bool = False) -> list[Action]:
        """Deliver a row to the clients but the persistent sessions following its topic, which
        take it from their own streams, in their log's order and at their QoS (rule 3);
        ``remembered``: noted as delivered (rule 2), a durable write whose row comes later."""
        self._feeding = not remembered
        if self.durable is not None:
            self.durable.feeding = True
        try:
            return self.broker.publish(message, shares=None if self.shared else ())
        finally:
            self._feeding = False
            if self.durable is not None:
                self.durable.feeding = False

    async def run(self, reconnect_delay: float = 0.5) -> None:
        """Follow every routed dataset until cancelled; reconnect to the relay on failures."""
        streams: dict[str, LiveView] = {}
        while True:
            try:
                async with connect(self.url(), name="mqtt-log") as subscriber:
                    async with asyncio.TaskGroup() as tasks:
                        for dataset in self.routes.datasets():
                            tasks.create_task(self._follow(subscriber, dataset, streams))
                    return  # every dataset refused: nothing to follow
            except* (OSError, FanoutError, ConnectionError) as errors:
                log.warning(
                    "mqtt log feed: %s; again in %.1f s", errors.exceptions, reconnect_delay
                )
            await asyncio.sleep(reconnect_delay)

    async def _follow(
        self, subscriber: Subscriber, dataset: str, streams: dict[str, LiveView]
    ) -> None:
        try:
            stream = await subscriber.subscribe(
                topic_view("#"), dataset, mode="every", resume=streams.get(dataset)
            )
        except SubscriptionError as error:
            log.warning("mqtt log feed: %r not followed: %s", dataset, error)
            return
        streams[dataset] = stream
        self.keys[dataset] = stream.key
        async for update in stream:
            self.apply(self.take(stream.key, update))


def _remember(memo: dict[str, deque[bytes]], topic: str, payload: bytes) -> None:
    """Note ``payload`` delivered on ``topic`` (bounded: the oldest topic goes first)."""
    held = memo.get(topic)
    if held is None:
        if len(memo) >= MEMO:
            del memo[next(iter(memo))]
        held = memo[topic] = deque(maxlen=MEMO)
    held.append(payload)


def _forget(memo: dict[str, deque[bytes]], topic: str, payload: bytes) -> bool:
    """Take one ``payload`` noted on ``topic`` out; whether there was one."""
    held = memo.get(topic)
    if held is None or payload not in held:
        return False
    held.remove(payload)
    if not held:
        del memo[topic]
    return True
