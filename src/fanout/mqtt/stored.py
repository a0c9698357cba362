"""A persistent MQTT session as kept in Redis, so that any relay of a cluster can resume it.

Rules:

1. One Redis string per session, keyed ``NAMESPACE + "session:" + client id``, holding JSON:
   the relay that wrote it last (``owner``), the session's expiry, its subscriptions (filter and
   SUBSCRIBE options), and for each followed subscription its position in the topic dataset's
   log: an ``every``-mode resume token (epoch, seq, the topics held after that seq), or none
   yet; its QoS 2 messages in flight with their packet identifiers (and whether PUBRECed), and
   the QoS 2 messages completed that its positions do not cover yet (``durable`` rule 7).
   The key expires with the session: its expiry after the last write.
2. A record that does not decode is treated as no record (a new session) and logged: a bad
   value in Redis must not keep a client from connecting.
3. Only the owner deletes a record (a compare-and-delete script on the one key): a relay
   whose copy of a session ended does not delete the copy another relay resumed.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.cluster import RedisCluster

from fanout.mqtt.sessions import Subscription

log = logging.getLogger(__name__)

#: Deletes KEYS[1] if its JSON's owner is ARGV[1].
DELETE_OWNED = """
local v = redis.call('GET', KEYS[1])
if v and cjson.decode(v)['owner'] == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True)
class Position:
    """Where a subscription's follow stream stopped: a resume token of the topic dataset."""

    epoch: int
    seq: int
    topics: frozenset[str]
    key: str = "topic"  # the dataset's key column, which the token's topics are


@dataclass(frozen=True)
class Record:
    """What Redis holds of one persistent session (rule 1)."""

    owner: str
    expiry: float
    subscriptions: tuple[Subscription, ...]
    positions: dict[str, Position | None] = field(default_factory=dict)
    #: QoS 2 messages in flight: (packet identifier, topic, payload, released by a PUBREC).
    in_flight: tuple[tuple[int, str, bytes, bool], ...] = ()
    #: QoS 2 messages completed past the positions: (topic, payload).
    done: tuple[tuple[str, bytes], ...] = ()

    def encode(self) -> str:
        """The JSON text stored."""
        return json.dumps(
            {
                "owner": self.owner,
                "expiry": self.expiry,
                "subs": [
                    [s.filter, s.qos, s.no_local, s.retain_as_published, s.identifier]
                    for s in self.subscriptions
                ],
                "pos": {
                    text: None if p is None else [p.epoch, p.seq, sorted(p.topics), p.key]
                    for text, p in sorted(self.positions.items())
                },
                "qos2": [[i, t, _text(m), r] for i, t, m, r in self.in_flight],
                "done": [[t, _text(m)] for t, m in self.done],
            },
            sort_keys=True,
        )

    @classmethod
    def decode(cls, text: str | bytes) -> Record:
        """The record ``encode`` wrote.

        Raises:
            ValueError: the text is not such a record.
        """
        try:
            data: Any = json.loads(text)
            subscriptions = tuple(
                Subscription(str(f), int(q), bool(n), bool(r), None if i is None else int(i))
                for f, q, n, r, i in data["subs"]
            )
            positions = {
                str(text): None
                if p is None
                else Position(int(p[0]), int(p[1]), frozenset(map(str, p[2])), str(p[3]))
                for text, p in data["pos"].items()
            }
            in_flight = tuple(
                (int(i), str(t), _bytes(m), bool(r)) for i, t, m, r in data.get("qos2", [])
            )
            done = tuple((str(t), _bytes(m)) for t, m in data.get("done", []))
            return cls(
                str(data["owner"]),
                float(data["expiry"]),
                subscriptions,
                positions,
                in_flight,
                done,
            )
        except (TypeError, KeyError, ValueError, IndexError) as error:
            raise ValueError(f"not a stored MQTT session: {error}") from error


def _text(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


def _bytes(text: object) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"a payload is base64 text, not {type(text).__name__}")
    return base64.b64decode(text, validate=True)


class SessionStore:
    """Records of persistent sessions in Redis Cluster (one key each: any node may hold it)."""

    def __init__(self, redis: RedisCluster, namespace: str = "fanout:mt:") -> None:
        self.redis, self.prefix = redis, namespace + "session:"
        self._delete = redis.register_script(DELETE_OWNED)

    async def save(self, client_id: str, record: Record) -> None:
        """Write ``record``, expiring ``record.expiry`` seconds from now (at least 1 s)."""
        expiry_ms = max(1000, int(min(record.expiry, 10**9) * 1000))
        await self.redis.set(self.prefix + client_id, record.encode(), px=expiry_ms)

    async def load(self, client_id: str) -> Record | None:
        """The record of ``client_id``, or None (none, or one that does not decode: rule 2)."""
        text = await self.redis.get(self.prefix + client_id)
        if text is None:
            return None
        try:
            return Record.decode(text)
        except ValueError as error:
            log.warning("mqtt session %r in Redis ignored: %s", client_id, error)
            return None

    async def delete(self, client_id: str, owner: str) -> bool:
        """Delete the record of ``client_id`` if ``owner`` wrote it last (rule 3)."""
        return bool(await self._delete(keys=[self.prefix + client_id], args=[owner]))
