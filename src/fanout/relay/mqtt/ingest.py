"""MQTT messages into topic datasets: which dataset a topic belongs to, and the batches sent.

Rules:

1. A topic belongs to the dataset of the longest configured prefix it starts with
   (``fanout relay --mqtt-route plant/=sensors``), otherwise to the default topic dataset
   (``--mqtt-dataset``), otherwise to none: it is delivered to MQTT clients and not kept.
2. A topic dataset holds the retained message of each topic: a PUBLISH with RETAIN upserts the
   row ``{key: topic, payload: text}``, one with RETAIN and an empty payload deletes it
   [MQTT-3.3.1-6, 3.3.1-10]. Messages without RETAIN are delivered live only: MQTT keeps
   nothing of them, and neither does the dataset (or its log).
3. The producer API takes text: a payload that is not UTF-8 is not ingested, and is counted
   (``skipped``).
4. Messages wait in a bounded buffer for the next batch (one ``publish`` per dataset); within
   one batch the last message of a topic wins, as it does in the dataset's state. Past
   ``max_pending`` topics waiting, new ones are dropped and counted (``dropped``): the
   publisher away must not cost the relay unbounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fanout.errors import ConfigError
from fanout.relay.mqtt.packets import Publish
from fanout.views.topic.syntax import check_text

PAYLOAD = "payload"


@dataclass(frozen=True)
class Routes:
    """Which topic dataset each topic belongs to (rule 1)."""

    default: str | None = None
    prefixes: tuple[tuple[str, str], ...] = ()

    def dataset(self, topic: str) -> str | None:
        """The dataset ``topic`` belongs to, or None."""
        best: tuple[int, str] | None = None
        for prefix, dataset in self.prefixes:
            if topic.startswith(prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), dataset)
        return best[1] if best else self.default

    def datasets(self) -> list[str]:
        """Every dataset a topic may belong to."""
        names = [dataset for _, dataset in self.prefixes]
        return sorted(set(names + ([self.default] if self.default else [])))


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
    """Retained messages waiting for the next batch, per dataset (rules 2-4)."""

    routes: Routes
    max_pending: int = 100_000
    upserts: dict[str, dict[str, str]] = field(default_factory=dict)
    deletes: dict[str, set[str]] = field(default_factory=dict)
    skipped: int = 0
    dropped: int = 0
    _size: int = 0

    def add(self, message: Publish) -> bool:
        """Keep ``message`` for its dataset's next batch; whether it was kept."""
        dataset = self.routes.dataset(message.topic)
        if dataset is None or not message.retain:
            return False
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

    def take(self) -> list[tuple[str, dict[str, str], list[str]]]:
        """(dataset, {topic: payload}, deleted topics) of every dataset with messages; emptied."""
        batches = [
            (dataset, self.upserts.get(dataset, {}), sorted(self.deletes.get(dataset, ())))
            for dataset in sorted(set(self.upserts) | set(self.deletes))
            if self.upserts.get(dataset) or self.deletes.get(dataset)
        ]
        self.upserts, self.deletes, self._size = {}, {}, 0
        return batches
