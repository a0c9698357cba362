"""MQTT messages into topic datasets: which dataset a topic belongs to, and the batches sent
(docs/mqtt.md). Rules:

1. A topic belongs to the dataset of its longest configured prefix (``--mqtt-route``), else to
   ``--mqtt-dataset``, else to none (delivered, not kept).
2. A retained PUBLISH upserts the row ``{key: topic, payload}``; an empty one deletes it
   [MQTT-3.3.1-6, 3.3.1-10].
3. A message without RETAIN is kept only at QoS 1 or 2 in a dataset that logs messages
   (``logs_messages``), as a row ``{key: "TOPIC#ID", topic, payload, retain: false}`` deleted
   ``MESSAGE_TTL`` seconds later; retained rows there have ``retain: true``.
4. A payload that is not UTF-8 is not ingested, and is counted (``skipped``).
5. Messages wait in a bounded buffer for the next batch (the last retained one of a topic wins);
   past ``max_pending`` new ones are dropped and counted (``dropped``).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from fanout.errors import ConfigError
from fanout.mqtt.packets import Publish
from fanout.views import registry
from fanout.views.topic.syntax import check_text
from fanout.wire.messages import DatasetInfo

PAYLOAD = "payload"
TOPIC = "topic"
RETAIN = "retain"
#: Seconds a logged message without RETAIN stays a row (the relay's log retention, 600 s by
#: default, is as long: a session away longer resumes from the state, ``durable``).
MESSAGE_TTL = 600.0


def logs_messages(info: DatasetInfo) -> bool:
    """Whether ``info`` is a dataset that logs messages without RETAIN (rule 3)."""
    return (
        registry.language(info.index) == "topic"
        and info.key != TOPIC
        and info.index_columns == [TOPIC]
        and info.columns.get(RETAIN) == "|b1"  # boolean
        and PAYLOAD in info.columns
    )


def is_message_key(key: str) -> bool:
    """Whether ``key`` is a logged message's row (rule 3), not a topic's retained row."""
    return "#" in key


@dataclass(frozen=True)
class Routes:
    """Which topic dataset each topic belongs to (rule 1)."""

    default: str | None = None
    prefixes: tuple[tuple[str, str], ...] = ()

    def dataset(self, topic: str) -> str | None:
        """The dataset ``topic`` belongs to, or None (the broker's own ``$SYS`` topics: none,
        ``mqtt.introspection``)."""
        if topic.startswith("$SYS/"):
            return None
        best: tuple[int, str] | None = None
        for prefix, dataset in self.prefixes:
            if topic.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), dataset)
        return best[1] if best else self.default

    def datasets(self) -> list[str]:
        """Every dataset a topic may belong to."""
        names = [dataset for _, dataset in self.prefixes]
        return sorted(set(names + ([self.default] if self.default else [])))

    def reachable(self, topic_filter: str) -> set[str]:
        """The datasets a topic ``topic_filter`` matches may belong to: never fewer, at times
        more (its topics all start with its text before the first wildcard; a prefix is
        reachable if one of the two starts the other, the default unless that text starts
        with a prefix). ``$share/GROUP/`` is read through."""
        if topic_filter.startswith("$share/"):
            topic_filter = topic_filter.split("/", 2)[2]
        wild = [at for at in (topic_filter.find("+"), topic_filter.find("#")) if at >= 0]
        if not wild:  # one topic
            dataset = self.dataset(topic_filter)
            return set() if dataset is None else {dataset}
        start = topic_filter[: min(wild)]
        if topic_filter[min(wild)] == "#":
            start = start.removesuffix("/")  # ``a/#`` matches ``a`` too
        found = {
            d for prefix, d in self.prefixes if prefix.startswith(start) or start.startswith(prefix)
        }
        if self.default and not any(start.startswith(prefix) for prefix, _ in self.prefixes):
            found.add(self.default)
        return found


def parse_route(text: str) -> tuple[str, str]:
    """``PREFIX=DATASET`` as (prefix, dataset).

    Raises:
        ConfigError: no ``=``, an empty prefix or dataset, or a prefix with a wildcard.
    """
    prefix, equals, dataset = text.rpartition("=")
    if not equals or not prefix or not dataset:
        raise ConfigError(f"mqtt route {text!r} is not PREFIX=DATASET (plant/=sensors)")
    check_text(prefix, "mqtt route prefix")
    if "+" in prefix or "#" in prefix:
        raise ConfigError(f"mqtt route prefix {prefix!r} is a topic prefix: no wildcards")
    return prefix, dataset


@dataclass
class Pending:
    """Messages waiting for the next batch, per dataset (rules 2-5).

    ``logged`` names the datasets that log messages without RETAIN (rule 3; the producer link
    fills it from the publisher's catalog). ``messages`` holds those waiting: (key, topic,
    payload) in the order they came.
    """

    routes: Routes
    max_pending: int = 100_000
    upserts: dict[str, dict[str, str]] = field(default_factory=dict)
    deletes: dict[str, set[str]] = field(default_factory=dict)
    messages: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    logged: set[str] = field(default_factory=set)
    skipped: int = 0
    dropped: int = 0
    _size: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def carried(self, message: Publish) -> bool:
        """Whether the log of ``message``'s dataset will carry it, once ``add``ed (rules 2-4)."""
        dataset = self.routes.dataset(message.topic)
        if dataset is None or not (message.retain or (message.qos and dataset in self.logged)):
            return False
        if message.retain and not message.payload:
            return False  # a deleted row: nothing is delivered of it
        try:
            message.payload.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def add(self, message: Publish) -> bool:
        """Keep ``message`` for its dataset's next batch; whether it was kept."""
        dataset = self.routes.dataset(message.topic)
        if dataset is None:
            return False
        if not message.retain:
            return self._add_message(dataset, message)
        upserts = self.upserts.setdefault(dataset, {})
        deletes = self.deletes.setdefault(dataset, set())
        known = message.topic in upserts or message.topic in deletes
        if not known and self._size >= self.max_pending:
            self.dropped += 1
            return False
        if message.payload:
            try:
                text = message.payload.decode("utf-8")
            except UnicodeDecodeError:
                self.skipped += 1
                return False
            upserts[message.topic] = text
            deletes.discard(message.topic)
        else:
            upserts.pop(message.topic, None)
            deletes.add(message.topic)
        self._size += not known
        return True

    def _add_message(self, dataset: str, message: Publish) -> bool:
        if not message.qos or dataset not in self.logged:
            return False
        if self._size >= self.max_pending:
            self.dropped += 1
            return False
        try:
            text = message.payload.decode("utf-8")
        except UnicodeDecodeError:
            self.skipped += 1
            return False
        # Zero-padded: keys of one topic sort in the order their messages came (``durable``).
        key = f"{message.topic}#{self._incarnation}-{next(self._ids):012d}"
        self.messages.setdefault(dataset, []).append((key, message.topic, text))
        self._size += 1
        return True

    def take(self) -> list[Batch]:
        """The batch of every dataset with messages waiting; emptied."""
        names = set(self.upserts) | set(self.deletes) | set(self.messages)
        batches = [
            Batch(
                dataset,
                self.upserts.get(dataset, {}),
                sorted(self.deletes.get(dataset, ())),
                self.messages.get(dataset, []),
            )
            for dataset in sorted(names)
            if self.upserts.get(dataset) or self.deletes.get(dataset) or self.messages.get(dataset)
        ]
        self.upserts, self.deletes, self.messages, self._size = {}, {}, {}, 0
        return batches


@dataclass(frozen=True)
class Batch:
    """What one dataset's next ``Publish`` carries: retained messages by topic, topics whose
    retained message was removed, and logged messages without RETAIN as (key, topic, payload)."""

    dataset: str
    upserts: dict[str, str]
    deletes: list[str]
    messages: list[tuple[str, str, str]] = field(default_factory=list)
