"""Rows of a topic dataset's log as MQTT messages (``ingest`` rules 2-3), for ``fromlog`` and
``durable``."""

from __future__ import annotations

from dataclasses import dataclass

from fanout.client.subscriber import Update
from fanout.mqtt import packets as p
from fanout.mqtt.ingest import PAYLOAD, RETAIN, TOPIC


def retained_with_payload(message: p.Publish) -> bool:
    """Whether ``message`` is retained with a payload: a message any topic dataset keeps."""
    return bool(message.retain and message.payload)


@dataclass(frozen=True, order=True)
class LogRow:
    """A row of a topic dataset's log as an MQTT message (``ingest`` rules 2-3): its topic, its
    row's key (the topic, or a logged message's ``TOPIC#ID``), payload, and whether retained."""

    topic: str
    key: str
    payload: bytes
    retain: bool


def rows_of(update: Update, key: str) -> list[LogRow]:
    """The rows ``update`` entered or updated, as messages in the log's order within one seq:
    by topic, then by key (a topic's retained row first, then its logged messages as they
    came). A NULL payload is no message. In a dataset that logs messages the topic is the
    ``topic`` column and ``retain`` says which rows are retained messages."""
    found = []
    for columns in (update.entered, update.updated):
        if key not in columns or PAYLOAD not in columns:
            continue
        keys = [str(k) for k in columns[key].tolist()]
        topics = [str(t) for t in columns[TOPIC].tolist()] if TOPIC in columns else keys
        retained = columns[RETAIN].tolist() if RETAIN in columns else [True] * len(keys)
        payloads = columns[PAYLOAD].tolist()
        found += [
            LogRow(t, k, str(v).encode(), r is not False)
            for t, k, v, r in zip(topics, keys, payloads, retained, strict=True)
            if v is not None
        ]
    return sorted(found)
