"""The relay's producer link: retained MQTT messages into their topic datasets at the publisher.

A connection of its own to the publisher's control plane, as a ``producer`` (the relay's
upstream link stays the relay's; the retained state is read on another, as a ``reader``): it
sends each batch of ``ingest.Pending`` as one ``Publish`` per dataset and waits for it to be
durable (``Published``) before the next. The live path to MQTT clients never waits for it, nor
for Spark.

When it connects it also reads each routed dataset's rows (``ReadState`` of ``#``) into the
broker's retained messages that the broker does not hold yet: a relay that restarts serves the
dataset's retained state at once, as MQTT's retained messages.

A refused batch (a dataset that is not an ``ingest`` topic dataset with a ``payload`` string
column, say) is logged and counted (``refused``), not retried: resending cannot make it fit.
A lost connection is retried, with the batch in hand put back first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from fanout.connection import dial
from fanout.errors import ProtocolError
from fanout.relay.mqtt.broker import Broker
from fanout.relay.mqtt.ingest import PAYLOAD, Pending
from fanout.relay.mqtt.packets import Publish as MqttPublish
from fanout.views.topic import TopicFilter
from fanout.wire import codec
from fanout.wire.columns import Columns, decode_columns, encode_columns
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
from fanout.wire.session import check_welcome

log = logging.getLogger(__name__)

MAX_FRAME = 64 << 20


class ProducerLink:
    """Sends ``pending`` to the publisher at ``url`` while the relay runs."""

    def __init__(self, url: str, pending: Pending, broker: Broker, name: str = "relay") -> None:
        """A link for ``pending``'s batches; ``broker`` gets the datasets' retained rows."""
        self.url, self.pending, self.broker, self.name = url, pending, broker, name
        self.wake = asyncio.Event()
        self.sent = 0  # messages made durable
        self.refused = 0  # batches the publisher refused
        self._req = 0

    def offer(self, message: MqttPublish) -> None:
        """A message a client published: keep it for the next batch if it is to be kept."""
        if self.pending.add(message):
            self.wake.set()

    async def run(self, reconnect_delay: float = 0.2) -> None:
        """Connect, load retained state, send batches as they come; reconnect on failures."""
        delay = reconnect_delay
        while True:
            try:
                async with dial(
                    self.url, max_size=MAX_FRAME, compression=None, open_timeout=10
                ) as websocket:
                    keys = await self._handshake(websocket, "producer")
                    delay = reconnect_delay
                    await self._load_retained(keys)
                    await self._send_batches(websocket, keys)
            except (OSError, ConnectionClosed, ProtocolError, TimeoutError) as error:
                log.warning("mqtt ingest to %s: %s; again in %.1f s", self.url, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _handshake(self, websocket: ClientConnection, role: str) -> dict[str, str]:
        hello = Hello(version=PROTOCOL_VERSION, role=role, name=f"{self.name}-mqtt")  # type: ignore[arg-type]
        await websocket.send(codec.encode(hello))
        decoder = codec.from_publisher()
        check_welcome(decoder.decode(await websocket.recv()))
        catalog = decoder.decode(await websocket.recv())
        if not isinstance(catalog, Catalog):
            raise ProtocolError(f"expected the catalog, got {type(catalog).__name__}")
        return {info.name: info.key for info in catalog.datasets if info.index == "topic"}

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
        async with dial(
            self.url, max_size=MAX_FRAME, compression=None, open_timeout=10
        ) as websocket:
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
            for topic, payload in zip(rows[keys[dataset]], rows[PAYLOAD], strict=True):
                if str(topic) not in self.broker.retained and payload is not None:
                    message = MqttPublish(str(topic), str(payload).encode(), 1, retain=True)
                    self.broker.retained[str(topic)] = message

    async def _send_batches(self, websocket: ClientConnection, keys: dict[str, str]) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            for dataset, upserts, deletes in self.pending.take():
                key = keys.get(dataset, "topic")
                frame = Publish(
                    req=self._next_req(),
                    dataset=dataset,
                    upserts=_columns({key: list(upserts), PAYLOAD: list(upserts.values())}),
                    deletes=_columns({key: deletes}),
                )
                try:
                    answer = await self._request(websocket, frame)
                except BaseException:
                    self._put_back(dataset, upserts, deletes)
                    raise
                if isinstance(answer, Error):
                    self.refused += 1
                    log.warning("mqtt ingest into %r refused: %s", dataset, answer.message)
                else:
                    self.sent += len(upserts) + len(deletes)

    def _put_back(self, dataset: str, upserts: dict[str, str], deletes: list[str]) -> None:
        """Return a batch not sent, under what came since (which is newer)."""
        newer = self.pending.upserts.setdefault(dataset, {})
        newer_deletes = self.pending.deletes.setdefault(dataset, set())
        for topic, payload in upserts.items():
            if topic not in newer and topic not in newer_deletes:
                newer[topic] = payload
        newer_deletes.update(t for t in deletes if t not in newer)
        self.wake.set()


def _columns(columns: dict[str, list[str]]) -> Columns:
    if not any(columns.values()):
        return Columns()
    return encode_columns({name: np.asarray(values) for name, values in columns.items()})
