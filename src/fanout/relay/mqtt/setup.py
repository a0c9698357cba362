"""A relay's MQTT parts, made from its ``RelayConfig``: the listener, the ingest link into topic
datasets, and the cluster membership (each only if configured)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from redis.asyncio.cluster import RedisCluster

from fanout.relay.mqtt.actions import Published
from fanout.relay.mqtt.broker import Broker
from fanout.relay.mqtt.cluster import Cluster
from fanout.relay.mqtt.ingest import Pending, Routes
from fanout.relay.mqtt.listener import Listener
from fanout.relay.mqtt.matchtable import MatchTable
from fanout.relay.mqtt.producer import ProducerLink

if TYPE_CHECKING:
    from fanout.relay.config import RelayConfig


def mqtt_parts(config: RelayConfig) -> tuple[Listener, ProducerLink | None, Cluster | None]:
    """The listener on ``config.mqtt_port``, and the ingest link and cluster if configured."""
    assert config.mqtt_port is not None
    broker = Broker(config.mqtt)
    listener = Listener(
        broker,
        config.host,
        config.mqtt_port,
        read_rate=config.read_rate,
        read_burst=config.read_burst,
    )
    link = None
    routes = Routes(config.mqtt_dataset, config.mqtt_routes)
    if routes.datasets():
        link = ProducerLink(config.publisher, Pending(routes), broker, config.name)
    cluster = None
    if config.mqtt_redis is not None:
        host, _, port = config.mqtt_redis.rpartition(":")
        # A new incarnation each start (rule 4 of matchtable): its old one is swept.
        incarnation = f"{config.name}-{uuid.uuid4().hex[:8]}"
        table = MatchTable(
            RedisCluster(host=host, port=int(port)), incarnation, lease=config.mqtt_lease
        )
        cluster = Cluster(table, broker, listener.apply, config.host, config.mqtt_peer_port)
        listener.on_filters = cluster.on_filters

    def published(action: Published) -> None:
        if link is not None:
            link.offer(action.message)
        if cluster is not None:
            cluster.on_published(action.message, action.client_id)

    listener.on_published = published
    return listener, link, cluster
