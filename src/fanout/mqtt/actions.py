"""What the broker says to its shell (``Send``, ``Close``, ``Published``, ``Restore``,
``Persist``, ``Authenticate``) and what
bounds it (``Limits``: ``fanout relay --mqtt-*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from fanout.errors import ConfigError
from fanout.mqtt import packets as p


@dataclass(frozen=True)
class Limits:
    """What one client may take of the broker (``fanout relay --mqtt-*`` flags).

    Attributes:
        max_packet: largest packet accepted, in bytes (announced in 5.0's CONNACK).
        max_queued: QoS 1 and 2 messages kept per session while its client is away or busy.
        session_expiry: longest a persistent session outlives its connection, in seconds.
        max_subscriptions: topic filters one session may hold.
        receive_maximum: QoS 1 and 2 messages in flight to one client (5.0 asks the client
            too), and QoS 2 messages of one client awaiting their PUBREL.
    """

    max_packet: int = 1 << 20
    max_queued: int = 1000
    session_expiry: float = 3600.0
    max_subscriptions: int = 10_000
    receive_maximum: int = 100

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a limit that could not work, named as its field.
        """
        limits = [
            ("max_packet", 16 <= self.max_packet <= p.MAX_VARINT + 5, "in [16, 268435460] bytes"),
            ("max_queued", self.max_queued >= 0, ">= 0"),
            ("session_expiry", 0 <= self.session_expiry < float("inf"), ">= 0 seconds, finite"),
            ("max_subscriptions", self.max_subscriptions >= 1, ">= 1"),
            ("receive_maximum", 1 <= self.receive_maximum <= 65535, "in [1, 65535]"),
        ]
        for name, holds, wanted in limits:
            if not holds:
                raise ConfigError(f"mqtt {name} must be {wanted}, not {getattr(self, name)}")


@dataclass(slots=True)  # not frozen: made for every packet out, where frozen costs 50% more
class Send:
    """Write ``data`` to connection ``connection``."""

    connection: int
    data: bytes


@dataclass(frozen=True)
class Close:
    """Close connection ``connection`` (after what was sent before)."""

    connection: int
    reason: str


@dataclass(frozen=True)
class Published:
    """A message a client published (or a will), accepted and delivered to the subscribers."""

    message: p.Publish
    client_id: str


@dataclass(frozen=True)
class Restore:
    """Read the session of ``client_id`` from Redis for connection ``connection``, whose
    CONNECT waits for it (``Broker.restored``)."""

    connection: int
    client_id: str


@dataclass(frozen=True)
class Persist:
    """Write the session of ``client_id`` to Redis before anything after this goes to
    connection ``connection``: a QoS 2 PUBLISH or PUBREL follows (``durable`` rule 7)."""

    connection: int
    client_id: str


@dataclass(frozen=True)
class Authenticate:
    """Check the credentials of ``connect``, which waits on connection ``connection`` for the
    verdict (``mqtt.access.login``, then ``Broker.admitted``)."""

    connection: int
    connect: p.Connect


Action: TypeAlias = Send | Close | Published | Restore | Persist | Authenticate
