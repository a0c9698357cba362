"""The relay's producer link: retained MQTT messages into their topic datasets at the publisher.

A connection of its own to the publisher, as a ``producer``: each batch of ``ingest.Pending``
goes as one ``Publish`` per dataset, the next once it is durable, shown at once to the relay's
``latest`` views (``show``); the broker never waits for it. Logged messages' rows are deleted
``MESSAGE_TTL`` seconds later in a later batch. On connecting it reads each routed dataset's
rows (``ReadState`` of ``#``) into the broker's retained messages, so a restarted relay serves
them at once. A refused batch is logged and counted (``refused``), not retried; a lost
connection is retried with the batch in hand first.
Both connections present the relay's token and dial with its TLS settings, as its upstream link
does (``relay.config.Upstream``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from fanout import tls
from fanout.auth import PresentedToken
from fanout.connection import dial
from fanout.errors import ProtocolError
from fanout.mqtt.broker import Broker
from fanout.mqtt.ingest import (
    MESSAGE_TTL,
    PAYLOAD,
    RETAIN,
    TOPIC,
    Batch,
    Pending,
    logs_messages,
)
from fanout.mqtt.packets import Publish as MqttPublish
from fanout.relay.config import Upstream
from fanout.views import registry
from fanout.views.topic import TopicFilter
from fanout.wire import codec
from fanout.wire.columns import Columns, decode_columns, encode_columns
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Catalog,
    Error,
    Hello,
    Publish,
    Published,
    ReadState,
    StateRows,
)

log = logging.getLogger(__name__)

MAX_FRAME = 64 << 20


class ProducerLink:
    """Sends ``pending`` to the relay's publisher (``upstream``) while the relay runs."""

    def __init__(
        self, upstream: Upstream, pending: Pending, broker: Broker, name: str = "relay"
    ) -> None:
        """A link for ``pending``'s batches; ``broker`` gets the datasets' retained rows."""
        self.url, self.pending, self.broker, self.name = upstream.publisher, pending, broker, name
        self._ssl = tls.for_url(upstream.publisher, upstream.tls_ca)
        self._token = PresentedToken(upstream.token, upstream.token_file)
        self.wake = asyncio.Event()
        self.sent = 0  # messages made durable
        self.refused = 0  # batches the publisher refused
        self._req = 0
        #: (when, dataset, key) of logged message rows to delete, oldest first (``ingest`` 3).
        self._expiring: deque[tuple[float, str, str]] = deque()
        #: Each batch as it goes, to the relay's live path (shown at once to its ``latest``
        #: views): what it returns hears the answer, the offset logged up to or None (refused,
        #: or unanswered: it goes again, shown again).
        self.show: Callable[[Publish], Callable[[int | None], None]] = lambda frame: _unheard

    def offer(self, message: MqttPublish) -> None:
        """A message a client published: keep it for the next batch if it is to be kept."""
        if self.pending.add(message):
            self.wake.set()

    async def run(self, reconnect_delay: float = 0.2) -> None:
        """Connect, load retained state, send batches as they come; reconnect on failures."""
        delay = reconnect_delay
        while True:
            try:
                async with self._dial() as websocket:
                    keys = await self._handshake(websocket, "producer")
                    delay = reconnect_delay
                    await self._load_retained(keys)
                    await self._send_batches(websocket, keys)
            except (OSError, ConnectionClosed, ProtocolError, TimeoutError) as error:
                log.warning("mqtt ingest to %s: %s; again in %.1f s", self.url, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _dial(self) -> contextlib.AbstractAsyncContextManager[ClientConnection]:
        return dial(self.url, max_size=MAX_FRAME, compression=None, open_timeout=10, ssl=self._ssl)

    async def _handshake(self, websocket: ClientConnection, role: str) -> dict[str, str]:
        hello = Hello(
            version=PROTOCOL_VERSION,
            role=role,  # type: ignore[arg-type]
            name=f"{self.name}-mqtt",
            token=self._token.current(),
        )
        await websocket.send(codec.encode(hello))
        decoder = codec.from_publisher()
        check_welcome(decoder.decode(await websocket.recv()))
        catalog = decoder.decode(await websocket.recv())
        if not isinstance(catalog, Catalog):
            raise ProtocolError(f"expected the catalog, got {type(catalog).__name__}")
        logged = {info.name for info in catalog.datasets if logs_messages(info)}
        self.pending.logged.clear()
        self.pending.logged.update(logged & set(self.pending.routes.datasets()))
        return {
            info.name: info.key
            for info in catalog.datasets
            if registry.language(info.index) == "topic"
        }

    async def _request(self, websocket: ClientConnection, frame: Any) -> Any:
        await websocket.send(codec.encode(frame))
        decoder = codec.from_publisher()
        while True:
            answer = decoder.decode(await websocket.recv())
            if isinstance(answer, Error) and answer.ref == frame.req:
                return answer
            if isinstance(answer, StateRows | Published) and answer.req == frame.req:
                return answer
            if not isinstance(answer, Catalog):  # a catalog may be sent again: nothing to do
                raise ProtocolError(f"unexpected frame from the publisher: {answer!r:.200}")

    def _next_req(self) -> int:
        self._req += 1
        return self._req

    async def _load_retained(self, keys: dict[str, str]) -> None:
        """Read the routed datasets' rows as a reader (a producer only writes: each role reads
        or writes only what it is for), on a connection of its own."""
        async with self._dial() as websocket:
            await self._handshake(websocket, "reader")
            await self._read_retained(websocket, keys)

    async def _read_retained(self, websocket: ClientConnection, keys: dict[str, str]) -> None:
        for dataset in self.pending.routes.datasets():
            if dataset not in keys:
                log.warning("mqtt ingest: %r is not a topic dataset of the publisher", dataset)
                continue
            frame = ReadState(self._next_req(), dataset, TopicFilter("#"))
            answer = await self._request(websocket, frame)
            if isinstance(answer, Error):
                log.warning("mqtt ingest: reading %r: %s", dataset, answer.message)
                continue
            rows = decode_columns(answer.rows)
            if PAYLOAD not in rows:
                continue
            topics = rows[TOPIC] if dataset in self.pending.logged else rows[keys[dataset]]
            logged = dataset in self.pending.logged
            retained = rows[RETAIN].tolist() if logged else [True] * len(topics)
            for topic, payload, kept in zip(topics, rows[PAYLOAD], retained, strict=True):
                if kept is False:  # a logged message without RETAIN (NULL: a retained row)
                    continue
                if str(topic) not in self.broker.retained and payload is not None:
                    message = MqttPublish(str(topic), str(payload).encode(), 1, retain=True)
                    self.broker.retained[str(topic)] = message

    async def _send_batches(self, websocket: ClientConnection, keys: dict[str, str]) -> None:
        while True:
            wait = self._expiring[0][0] - time.monotonic() if self._expiring else None
            # A timeout: a logged message's row is due for deletion.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), None if wait is None else max(wait, 0))
            self.wake.clear()
            expired = self._take_expired()
            batches = {batch.dataset: batch for batch in self.pending.take()}
            for dataset in sorted(set(batches) | set(expired)):
                batch = batches.get(dataset) or Batch(dataset, {}, [])
                await self._send(
                    websocket, keys.get(dataset, TOPIC), batch, expired.get(dataset, [])
                )

    async def _send(
        self, websocket: ClientConnection, key: str, batch: Batch, expired: list[str]
    ) -> None:
        """Send ``batch`` (and the deletion of ``expired`` message rows) as one ``Publish``."""
        dataset, upserts, deletes = batch.dataset, batch.upserts, batch.deletes
        if dataset in self.pending.logged:
            keys_ = [*upserts, *(k for k, _, _ in batch.messages)]
            rows: dict[str, list[Any]] = {
                key: keys_,
                TOPIC: [*upserts, *(t for _, t, _ in batch.messages)],
                PAYLOAD: [*upserts.values(), *(v for _, _, v in batch.messages)],
                RETAIN: [True] * len(upserts) + [False] * len(batch.messages),
            }
        else:
            rows = {key: list(upserts), PAYLOAD: list(upserts.values())}
        frame = Publish(
            req=self._next_req(),
            dataset=dataset,
            upserts=_columns(rows),
            deletes=_columns({key: [*deletes, *expired]}),
        )
        settle = self.show(frame)
        try:
            answer = await self._request(websocket, frame)
        except BaseException:
            settle(None)
            self._put_back(batch, expired)
            raise
        if isinstance(answer, Error):
            settle(None)
            self.refused += 1
            log.warning("mqtt ingest into %r refused: %s", dataset, answer.message)
            return
        settle(answer.last)
        self.sent += len(upserts) + len(deletes) + len(batch.messages)
        due = time.monotonic() + MESSAGE_TTL
        self._expiring.extend((due, dataset, k) for k, _, _ in batch.messages)

    def _take_expired(self) -> dict[str, list[str]]:
        """The logged message rows due for deletion, by dataset."""
        expired: dict[str, list[str]] = {}
        now = time.monotonic()
        while self._expiring and self._expiring[0][0] <= now:
            _, dataset, key = self._expiring.popleft()
            expired.setdefault(dataset, []).append(key)
        return expired

    def _put_back(self, batch: Batch, expired: list[str]) -> None:
        """Return a batch not sent, under what came since (which is newer)."""
        dataset = batch.dataset
        newer = self.pending.upserts.setdefault(dataset, {})
        newer_deletes = self.pending.deletes.setdefault(dataset, set())
        for topic, payload in batch.upserts.items():
            if topic not in newer and topic not in newer_deletes:
                newer[topic] = payload
        newer_deletes.update(t for t in batch.deletes if t not in newer)
        messages = self.pending.messages.setdefault(dataset, [])
        messages[:0] = batch.messages  # older than those that came since
        self._expiring.extendleft((0.0, dataset, k) for k in reversed(expired))
        self.wake.set()


def _unheard(last: int | None) -> None:
    """No live path hears the answer."""


def _columns(columns: dict[str, list[Any]]) -> Columns:
    if not any(columns.values()):
        return Columns()
    return encode_columns({name: np.asarray(values) for name, values in columns.items()})
