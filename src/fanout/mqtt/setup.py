"""A relay's MQTT front end (``relay.api.FrontEnd``), made from its ``RelayConfig``: the
listener (TCP, or TLS) and who may log in to it (``mqtt.access``), MQTT over WebSockets on the
relay's port, the ingest link into topic datasets, the cluster membership and its persistent
sessions in Redis (each only if configured)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from fanout import metrics, tls
from fanout.auth import Verifier
from fanout.cluster.registry import connect as redis_cluster
from fanout.errors import ConfigError
from fanout.metrics import Sample
from fanout.mqtt import introspection
from fanout.mqtt.access import Access, LoginLimiter
from fanout.mqtt.acl import read_acl
from fanout.mqtt.actions import Published
from fanout.mqtt.broker import Broker
from fanout.mqtt.durable import Durable
from fanout.mqtt.federation import Cluster
from fanout.mqtt.fromlog import LogFeed
from fanout.mqtt.ingest import Pending, Routes
from fanout.mqtt.listener import Listener
from fanout.mqtt.matchtable import MatchTable
from fanout.mqtt.passwords import read_passwords
from fanout.mqtt.producer import ProducerLink
from fanout.mqtt.stored import SessionStore
from fanout.mqtt.ws import MqttWebSockets
from fanout.relay.api import RelayApi

if TYPE_CHECKING:
    from fanout.relay.config import RelayConfig
    from fanout.relay.core.livepath import LivePath
    from fanout.relay.core.sends import Send
    from fanout.wire.messages import Publish

log = logging.getLogger(__name__)

#: The broker's JSON pages on the relay's port (``pages``): its clients, sessions, subscriptions.
PAGES = ("/v1/mqtt/clients", "/v1/mqtt/sessions", "/v1/mqtt/subscriptions")


class MqttFrontEnd:
    """The relay's MQTT broker: its listener, and its ingest link and cluster if configured.

    Attributes:
        listener: serves MQTT clients (``mqtt.listener``).
        ingest: keeps retained messages in topic datasets (``mqtt.producer``), if any.
        cluster: the relays' shared match table and forwarding (``mqtt.federation``), if any.
        websockets: MQTT over WebSockets on the relay's port (``mqtt.ws``), if on.
    """

    def __init__(self, config: RelayConfig) -> None:
        """The parts ``config.mqtt`` asks for (its ``port`` set)."""
        self._config = config
        self._relay: RelayApi | None = None
        self._started = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self.listener, self.ingest, self.cluster, self.feed = mqtt_parts(config, self._url)
        self.websockets: MqttWebSockets | None = None

    def join_live_path(self, live: LivePath, dispatch: Callable[[list[Send]], None]) -> None:
        """Have the relay's live path show the messages its clients publish to its ``latest``
        views at once (``ours``; ``dispatch`` sends what it says), and hand this broker's
        clients each durable write of the datasets it routes (``mqtt.fromlog`` rule 6), if it
        follows their logs, asked for while a client's subscription could take one."""
        if self.ingest is not None:
            self.ingest.show = functools.partial(_shown, live, dispatch)
        if self.feed is not None:
            live.durable = self.feed.written
            live.durable_datasets = frozenset(self.feed.routes.datasets())
            live.durable_wanted = self.feed.wanted

    def on_the_port(self, port: Callable[[], asyncio.Server | None]) -> MqttWebSockets | None:
        """MQTT over WebSockets on the relay's port (``port()``, its listener), if configured:
        the composition root hands it the port's MQTT upgrades (``http.server``)."""
        if self._config.mqtt.websocket:
            self.websockets = MqttWebSockets(
                self.listener,
                port,
                open_timeout=self._config.limits.hello_timeout,
                tls=self._config.listening.tls_cert is not None,
            )
        return self.websockets

    @property
    def port(self) -> int:
        """The port MQTT clients connect to (once started, if it was 0)."""
        return self.listener.port

    @property
    def broker(self) -> Broker:
        """The broker's state: sessions, retained messages."""
        return self.listener.broker

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Start the ingest link, join the cluster, then listen; return once listening."""
        self._relay, self._started = relay, time.monotonic()
        if self.ingest is not None:
            delay = self._config.upstream.reconnect_delay
            self._tasks.append(tasks.create_task(self.ingest.run(delay)))
        if self.cluster is not None:
            joined = asyncio.Event()
            self._tasks.append(tasks.create_task(self.cluster.run(joined.set)))
            await joined.wait()
        listening = asyncio.Event()
        self._tasks.append(tasks.create_task(self.listener.run(lambda _: listening.set())))
        await listening.wait()
        if self._config.mqtt.sys_interval > 0:
            self._tasks.append(tasks.create_task(self._publish_sys(self._config.mqtt.sys_interval)))
        where = self._config.listening.host
        over = "TLS" if self.listener.tls is not None else "TCP"
        log.info("relay %s: MQTT over %s on %s:%d", self._config.name, over, where, self.port)
        if self.websockets is not None:
            await self.websockets.start()
            log.info("relay %s: MQTT over WebSockets on the relay's port", self._config.name)
        # Warned, so that it shows at the default log level, where the other ports need tokens.
        level = logging.INFO if self._config.auth is None else logging.WARNING
        log.log(level, "relay %s: MQTT %s", self._config.name, describe(self.listener.access))

    def samples(self) -> list[Sample]:
        """The MQTT port's figures for ``GET /metrics``: the broker's (``mqtt.introspection``),
        what access refused (``mqtt.denials``) and the cluster's (``mqtt.federation``)."""
        figures = introspection.figures(self.broker, self.listener.traffic)
        cluster = [] if self.cluster is None else self.cluster.samples()
        return introspection.samples(figures) + self.broker.denials.samples() + cluster

    def pages(self) -> dict[str, tuple[str, introspection.Rows]]:
        """The JSON pages of the relay's port (``GET`` path -> what a page names its rows, and
        them; ``http.server`` serves them to admins): clients, sessions, subscriptions."""
        broker, listener = self.broker, self.listener
        clients, sessions, subscriptions = PAGES
        return {
            clients: ("clients", lambda: introspection.clients(broker, listener.peers)),
            sessions: ("sessions", lambda: introspection.sessions(broker)),
            subscriptions: ("subscriptions", lambda: introspection.subscriptions(broker)),
        }

    async def _publish_sys(self, interval: float) -> None:
        """Publish the ``$SYS`` topics every ``interval`` seconds (``mqtt.introspection``)."""
        version = metrics.build_info("relay").labels["version"]
        while True:
            figures = introspection.figures(self.broker, self.listener.traffic)
            uptime = time.monotonic() - self._started
            for message in introspection.sys_messages(figures, uptime, version):
                self.listener.apply(self.broker.publish(message, now=time.monotonic()))
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        """Stop listening and leave the cluster: its tasks end."""
        if self.websockets is not None:
            await self.websockets.stop()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    def _url(self) -> str:
        assert self._relay is not None, "the MQTT front end is not started"
        return self._relay.local_url()


def _shown(
    live: LivePath, dispatch: Callable[[list[Send]], None], request: Publish
) -> Callable[[int | None], None]:
    """``request``, a batch of messages going to the publisher, shown at once to the relay's
    ``latest`` views; what hears its answer (None: withdrawn)."""
    id, sends = live.ours(request, asyncio.get_running_loop().time())
    dispatch(sends)

    def answered(last: int | None) -> None:
        dispatch(live.refused(id) if last is None else live.accepted(id, last))

    return answered


def mqtt_parts(
    config: RelayConfig, url: Callable[[], str] | None = None
) -> tuple[Listener, ProducerLink | None, Cluster | None, LogFeed | None]:
    """The listener on ``config.mqtt.port``, and the ingest link, cluster and log feed if
    configured.

    ``url()`` is where the relay serves subscribers once it runs: with a topic dataset, the relay
    reads the dataset's log there (``fromlog``; in a cluster also for persistent sessions,
    ``durable``), unless its port asks for tokens or TLS.
    """
    mqtt = config.mqtt
    assert mqtt.port is not None
    broker = Broker(mqtt.limits)
    context = None
    if mqtt.tls_cert is not None and mqtt.tls_key is not None:
        context = tls.server_context(mqtt.tls_cert, mqtt.tls_key, mqtt.tls_client_ca)
    listener = Listener(
        broker,
        config.listening.host,
        mqtt.port,
        read_rate=config.limits.read_rate,
        read_burst=config.limits.read_burst,
        tls=context,
    )
    link = feed = None
    routes = Routes(config.mqtt.dataset, config.mqtt.routes)
    plain = config.auth is None and config.listening.tls_cert is None
    pending = Pending(routes)
    access = mqtt_access(config, routes.datasets())
    if not access.open:
        listener.access, broker.gated = access, True
        listener.logins = LoginLimiter(config.mqtt.login_burst, config.mqtt.login_rate)
    if routes.datasets():
        link = ProducerLink(config.upstream, pending, broker, config.name)
        if url is not None and plain:
            shared = config.mqtt.redis is None
            feed = LogFeed(
                broker, listener.apply, routes, url, shared=shared, carried=pending.carried
            )
            listener.companions.append(feed.run)
    cluster = None
    if config.mqtt.redis is not None:
        # A new incarnation each start (rule 4 of matchtable): its old one is swept. Its Redis
        # calls time out as the registry's do, so a Redis that stops answering is an error.
        incarnation = f"{config.name}-{uuid.uuid4().hex[:8]}"
        table = MatchTable(redis_cluster(config.mqtt.redis), incarnation, lease=config.mqtt.lease)
        cluster = Cluster(
            table,
            broker,
            listener.apply,
            config.listening.host,
            config.mqtt.peer_port,
            advertise=config.mqtt.peer_advertise,
        )
        listener.on_filters = cluster.on_filters
        if routes.datasets() and url is not None and plain:
            store = SessionStore(table.redis, table.namespace)
            durable = Durable(
                store,
                broker,
                listener.apply,
                routes,
                url=url,
                owner=incarnation,
                carried=pending.carried,
            )
            listener.on_restore = durable.on_restore
            listener.on_persist = durable.on_persist
            cluster.durable = durable
            if feed is not None:
                feed.durable = durable
        if feed is not None:
            cluster.relayed = feed.relayed
    if routes.datasets() and not plain:
        log.warning(
            "mqtt: other producers' messages do not reach MQTT clients, and persistent sessions"
            " stay in this relay (the relay's port asks for tokens or TLS)"
        )

    def published(action: Published) -> None:
        if link is not None:
            link.offer(action.message)
        if cluster is not None:
            cluster.on_published(action.message, action.client_id)

    listener.on_published = published
    return listener, link, cluster, feed


def mqtt_access(config: RelayConfig, datasets: list[str]) -> Access:
    """Who may log in to the MQTT port, as ``config`` says (``mqtt.access``).

    Raises:
        ConfigError: the password or ACL file cannot be read or does not parse, or nobody
            could log in (anonymous clients refused, and nothing to check others with).
    """
    mqtt = config.mqtt
    if mqtt.allow_anonymous is False and mqtt.password_file is None and config.auth is None:
        raise ConfigError(
            "--no-mqtt-allow-anonymous without --mqtt-password-file or --auth-key-file would"
            " refuse every MQTT client"
        )
    return Access(
        passwords=None if mqtt.password_file is None else read_passwords(mqtt.password_file),
        acl=None if mqtt.acl_file is None else read_acl(mqtt.acl_file),
        verifier=None if config.auth is None else Verifier(config.auth),
        anonymous=mqtt.allow_anonymous,
        datasets=datasets,
    )


def describe(access: Access | None) -> str:
    """What the start-up log says of who may log in."""
    if access is None or access.open:
        return "admits every client to every topic (no password file, token keys or ACL)"
    ways = [
        *(["the password file"] if access.passwords is not None else []),
        *(["tokens as the password"] if access.verifier is not None else []),
    ]
    logins = f"logins with {' or '.join(ways)}" if ways else "no logins"
    anonymous = "anonymous clients admitted" if access.anonymous else "anonymous clients refused"
    if access.anonymous and access.verifier is not None:
        anonymous += " (--mqtt-allow-anonymous: though the relay's other ports require tokens)"
    elif not access.anonymous and access.verifier is not None:
        anonymous += " (the relay requires tokens: --mqtt-allow-anonymous to admit them)"
    rules = "the ACL file" if access.acl is not None else "no ACL file: every topic"
    tokens = ", tokens' by their rules" if access.verifier is not None else ""
    return f"{logins}; {anonymous}; users' topics by {rules}{tokens}"
