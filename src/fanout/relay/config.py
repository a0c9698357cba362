"""How a relay runs: its ``RelayConfig``, in sections, each checking its limits when it is made.

The sections: where the relay listens (``Listening``), its upstream (``Upstream``), what one
connection and all of them may take (``Limits``), how it plans coverage and pushes
(``Planning``), what it sets in its process (``Process``), subscribers' authentication
(``fanout.auth.AuthConfig``), the map of responsibility (``Cluster``) and the MQTT listener
(``Mqtt``). ``fanout relay`` takes each limit as a flag (``fanout.cli.relay.RELAY_LIMITS``, whose
defaults a test holds equal to ``Limits``'s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from fanout.allocator import MAX_MMAP_THRESHOLD
from fanout.auth import AuthConfig
from fanout.cluster.settings import Cluster as Cluster  # noqa: PLC0414 (re-exported: a section of RelayConfig, owned by the cluster)
from fanout.errors import ConfigError
from fanout.mqtt.actions import Limits as MqttLimits
from fanout.relay.core.holding import CATALOG_WAIT, MAX_HELD
from fanout.relay.core.planner import IN_A_MAP, Policy
from fanout.relay.core.relaycore import MAX_SUBSCRIPTIONS
from fanout.relay.core.scheduler import AGING
from fanout.relay.core.throttle import CONTROL_BURST, CONTROL_SHARE, SQL_BURST, SQL_SHARE
from fanout.relay.data.tables import QUERY_TIMEOUT

#: The event loops a relay may run on (``Process.loop``).
EventLoop = Literal["uvloop", "asyncio"]


def _check(finite: Mapping[str, float], limits: list[tuple[str, bool, str, float]]) -> None:
    """Raises:
    ConfigError: a value not finite, or a limit that does not hold, named as the field is.
    """
    for name, value in finite.items():
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, not {value}")
    for name, holds, wanted, value in limits:
        if not holds:
            raise ConfigError(f"{name} must be {wanted}, not {value}")


@dataclass(frozen=True)
class Listening:
    """Where the relay serves subscribers.

    Attributes:
        host: interface to listen on for subscribers.
        port: port to listen on (0: any free port).
        tls_cert, tls_key: PEM files: serve ``wss://`` and ``https://`` with them (None: plain).
        serve_relays: accept relays below this one (``Hello{role: "relay"}``, ``fanout relay
            --upstream`` pointed here: a tier, ``tiers``); off, their ``Hello`` is refused,
            so that a relay facing the internet lets no stranger make it acquire data.
        reuse_port: listen with ``SO_REUSEPORT``: set on a leader's workers, which share the
            port (``relay.shell.workers``), not a flag of its own.
    """

    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    serve_relays: bool = False
    reuse_port: bool = False

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a certificate without its key, or the other way round.
        """
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("TLS needs both a certificate and its key (tls_cert, tls_key)")

    @property
    def tls(self) -> tuple[Path, Path] | None:
        """The certificate and key to serve TLS with, or None."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        return self.tls_cert, self.tls_key

    @property
    def scheme(self) -> str:
        """``ws`` or, with TLS, ``wss``."""
        return "ws" if self.tls_cert is None else "wss"


@dataclass(frozen=True)
class Upstream:
    """Where the relay's data comes from.

    Attributes:
        publisher: the publisher's control-plane URL (``ws://host:port``), or another relay's
            port (``fanout relay --upstream``: a tier, ``tiers``).
        token: the relay's own token, sent to the publisher in its ``Hello`` (role ``relay``).
        token_file: where ``token`` was read from: read again at every connection upstream, so
            that a token renewed in the file is presented at the next one (the publisher
            closes a connection when its token expires; the relay then connects again).
        tls_ca: PEM file of the authorities trusted for a ``wss://`` publisher (None: the
            system's).
        reconnect_delay: first delay before reconnecting upstream (doubles up to 5 s).
        keepalive: seconds between pings upstream, and the most a ping may wait for its pong:
            a link gone silent (a partition, not a reset) is given up within twice this, and
            the relay connects again and resumes (``docs/cluster.md``).
    """

    publisher: str
    token: str = field(default="", repr=False)
    token_file: Path | None = None
    tls_ca: Path | None = None
    reconnect_delay: float = 0.2
    keepalive: float = 20.0

    def __post_init__(self) -> None:
        if not 0 < self.keepalive < float("inf"):
            raise ConfigError(f"the upstream keepalive must be > 0 s, got {self.keepalive}")


@dataclass(frozen=True)
class Limits:
    """What one subscriber connection, and all of them together, may take (the flags of
    ``fanout.cli.relay.RELAY_LIMITS``, one for each field).

    Attributes:
        queue_limit: frames queued per subscriber before it is closed as a slow consumer.
        stall_timeout: seconds a subscriber may leave a push unread before it is closed.
        read_rate, read_burst: frames a second the relay reads from one subscriber
            connection, after a first burst (``relay.core.throttle``); past that it stops reading
            the connection for a while (TCP slows the sender down). 0: no limit.
        query_timeout: seconds a subscriber's SQL may run (on the event loop, every other
            subscriber waiting) before it is stopped and the subscription ends with an error.
        max_subscriptions: subscriptions one connection may hold at once; a new one beyond
            them is refused (``bad_request``).
        max_connections: subscriber connections the relay serves at once; the ``Hello`` of one
            more is refused with ``unavailable`` (its client may try another relay). Each takes
            a file descriptor: keep it below the process's limit (``ulimit -n``).
        hello_timeout: seconds a new connection may take to send its ``Hello``; one that has
            not is refused (``handshake``) and closed.
        catalog_wait: seconds a subscription to a dataset the relay does not know yet is held
            while the relay has no catalog from upstream (``relay.core.holding``); then it is
            refused with ``unavailable``.
        max_held: such subscriptions held at once, over all connections; one more is refused
            with ``unavailable`` at once.
        control_share, control_burst: seconds of the event loop acting on subscribers' frames
            (subscribe, unsubscribe) may take per second, all connections together, after a
            first burst (``relay.core.throttle``); past that a connection whose frame finds the
            time spent is not read until it is paid back, so pushes keep the rest of the loop.
        sql_share, sql_burst: seconds of the event loop one connection's SQL pushes may take
            per second, after a first burst (``relay.core.throttle.Budgets``); past that its SQL
            pushes are put off until the time is paid back, and other subscribers are served.
    """

    queue_limit: int = 64
    stall_timeout: float = 10.0
    read_rate: float = 1000.0
    read_burst: int = 1000
    query_timeout: float = QUERY_TIMEOUT
    max_subscriptions: int = MAX_SUBSCRIPTIONS
    max_connections: int = 10_000
    hello_timeout: float = 10.0
    catalog_wait: float = CATALOG_WAIT
    max_held: int = MAX_HELD
    control_share: float = CONTROL_SHARE
    control_burst: float = CONTROL_BURST
    sql_share: float = SQL_SHARE
    sql_burst: float = SQL_BURST

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a limit that could not work, named as the field (and the flag) is.
        """
        finite = (
            "stall_timeout",
            "read_rate",
            "query_timeout",
            "hello_timeout",
            "catalog_wait",
            "control_share",
            "control_burst",
            "sql_share",
            "sql_burst",
        )
        _check(
            {name: getattr(self, name) for name in finite},
            [
                ("queue_limit", self.queue_limit >= 1, ">= 1", self.queue_limit),
                ("stall_timeout", self.stall_timeout > 0, "> 0 seconds", self.stall_timeout),
                (
                    "read_rate",
                    self.read_rate >= 0,
                    ">= 0 frames a second (0: no limit)",
                    self.read_rate,
                ),
                ("read_burst", self.read_burst >= 1, ">= 1 frame", self.read_burst),
                ("query_timeout", self.query_timeout > 0, "> 0 seconds", self.query_timeout),
                ("max_subscriptions", self.max_subscriptions >= 1, ">= 1", self.max_subscriptions),
                ("max_connections", self.max_connections >= 1, ">= 1", self.max_connections),
                ("hello_timeout", self.hello_timeout > 0, "> 0 seconds", self.hello_timeout),
                ("catalog_wait", self.catalog_wait > 0, "> 0 seconds", self.catalog_wait),
                ("max_held", self.max_held >= 0, ">= 0 (0: refuse at once)", self.max_held),
                (
                    "control_share",
                    0 < self.control_share <= 1,
                    "in (0, 1] seconds a second",
                    self.control_share,
                ),
                ("control_burst", self.control_burst > 0, "> 0 seconds", self.control_burst),
                (
                    "sql_share",
                    0 < self.sql_share <= 1,
                    "in (0, 1] seconds a second",
                    self.sql_share,
                ),
                ("sql_burst", self.sql_burst > 0, "> 0 seconds", self.sql_burst),
            ],
        )


@dataclass(frozen=True)
class Planning:
    """How the relay plans coverage and hands out pushes.

    Attributes:
        policy: coverage planning policy; None: the default, which depends on whether the
            relay is in a map (``RelayConfig.policy``).
        aging: priority units a waiting subscription gains per second (``relay.core.scheduler``).
        pump_budget: seconds one round of pushes may run before yielding to the event loop.
    """

    policy: Policy | None = None
    aging: float = AGING
    pump_budget: float = 0.02

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a round of pushes with no time.
        """
        budget = self.pump_budget
        _check({"pump_budget": budget}, [("pump_budget", budget > 0, "> 0 seconds", budget)])


@dataclass(frozen=True)
class Process:
    """What the relay sets in its process while it runs, and how often it logs.

    Attributes:
        stats_every: seconds between two log lines of the relay's counters (0: never).
        switch_interval: the interpreter's thread switch interval while the relay runs
            (``sys.setswitchinterval``; 0: leave it as it is). Under load the event loop holds
            the GIL nearly all the time, and the writer thread waits up to this long each time
            it needs it back between two numpy calls: at Python's default of 5 ms, writing a
            tick's batch took three times its CPU time and the swap came that much later.
        young_collection: tracked objects allocated (net) before the garbage collector's
            youngest generation is collected, while the relay runs (``gc.set_threshold``'s
            first value; 0: leave it as it is). Python's default, 700, made the collector run
            33 times a second at 2,000 subscribers and promote enough short-lived objects
            (websockets' futures and frames, a round's lists) to trigger a full collection of
            the 300,000 objects of 2,000 connections every 8-10 s, an 80-100 ms pause. At
            10,000 nearly all of them die young: the collector took 2-6% of its former time
            and never ran a full collection in a trial.
        loop: the event loop the relay runs on (``relay.shell.loops``): ``asyncio`` (Python's
            own) or ``uvloop`` (libuv's, compiled). uvloop saved no CPU a push here (the socket
            write's system call is most of the loop's share) and, beside the writer thread,
            answered WebSocket handshakes seconds late under load (docs/benchmarks/relay.md,
            "Where a push's time goes").
        workers: processes serving the relay's port (``relay.shell.workers``): 1, this one;
            N > 1, this one becomes their leader, holding the link upstream, and starts N
            workers, edge relays of it sharing the port (``SO_REUSEPORT``).
        workers_port: with workers, the leader's own port on loopback (0: any free one), where
            the workers connect and whose ``/metrics`` sums theirs.
        shared_state: with workers, the leader writes each space-indexed dataset's state
            (fixed-width columns) to shared memory once a swap and its workers read it there
            (``relay.shell.sharedstate``); False: it reaches them as rows, as any relay below.
        shared_directory: a worker's: its leader's shared memory (set by the leader; empty:
            none, every batch comes as rows).
        mmap_threshold: glibc's mmap threshold in bytes, fixed while the relay runs
            (``fanout.allocator.tune``; 0: glibc's dynamic one). Not the default: fixed at 128
            KiB or 1 MiB it cost 4-8% more CPU a push (``bench/allocator.py``).
        trim_every: seconds between two ``malloc_trim(0)`` (``fanout.allocator.trimming``; 0:
            never). With glibc's defaults a mid relay's resident memory grew in steps (36 %/h
            over an hour) while its Python heap stayed level: memory freed after bursts, kept
            by glibc; trimmed every 10 s it gave memory back after peaks, at 0.3-0.7 ms a
            trim (docs/benchmarks/memory.md, "What the mid relay keeps").
    """

    stats_every: float = 30.0
    switch_interval: float = 0.001
    young_collection: int = 10_000
    loop: EventLoop = "asyncio"
    workers: int = 1
    workers_port: int = 0
    shared_state: bool = True
    shared_directory: str = ""
    mmap_threshold: int = 0
    trim_every: float = 10.0

    def __post_init__(self) -> None:
        if not 0 <= self.mmap_threshold <= MAX_MMAP_THRESHOLD:
            raise ConfigError(
                f"mmap_threshold must be 0 (glibc's dynamic one) to {MAX_MMAP_THRESHOLD} bytes,"
                f" not {self.mmap_threshold}"
            )
        if self.trim_every < 0:
            raise ConfigError(f"trim_every must be >= 0 seconds (0: never), not {self.trim_every}")
        if self.loop not in get_args(EventLoop):
            raise ConfigError(f"loop: {self.loop!r} is not one of {', '.join(get_args(EventLoop))}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, not {self.workers}")
        if not 0 <= self.workers_port <= 65535:
            raise ConfigError(
                f"workers_port must be a port (0: any free one), not {self.workers_port}"
            )


@dataclass(frozen=True)
class Mqtt:
    """The relay's MQTT listener (``fanout.mqtt``), if any.

    Attributes:
        port: port of the MQTT listener (0: any free port), None: none.
        limits: what one MQTT client may take (``fanout relay --mqtt-*``); MQTT connections
            are read at most ``Limits.read_rate`` packets a second after ``read_burst``, as
            subscribers' frames are.
        dataset, routes: the topic dataset retained MQTT messages are kept in, by default and
            by topic prefix (``mqtt.ingest``); neither: none is kept.
        redis: ``host:port`` of a Redis Cluster node holding the shared match table of a
            cluster of relays (``mqtt.federation``); None: this relay is a broker alone.
        peer_port: port other relays forward MQTT messages to (0: any free port).
        peer_advertise: ``host:port`` other relays reach that port at, for a relay behind
            NAT or a TCP proxy (None: the listening host and the port as it listens).
        lease: seconds a dead relay stays a subscriber in the shared table.
        tls_cert, tls_key: PEM files: the MQTT port serves TLS with them (None: plain TCP).
        tls_client_ca: PEM file of the authorities whose client certificates the MQTT port
            asks for and requires (None: no client certificate asked for).
        websocket: also serve MQTT over WebSockets (subprotocol ``mqtt``) on the relay's port.
        password_file: the users who may log in and their password hashes (``fanout passwd``;
            ``mqtt.passwords``), None: none.
        acl_file: the topics each user (and anonymous clients) may read and write, in
            Mosquitto's ACL format (``mqtt.acl``), None: every topic.
        allow_anonymous: admit clients that give no user name and password; None: only when
            neither a password file nor token keys (``auth``) check credentials.
        login_burst, login_rate: failed logins allowed from one address at once, and per
            second after (``mqtt.access.LoginLimiter``).
        sys_interval: seconds between two publications of the broker's ``$SYS`` topics
            (``mqtt.introspection``); 0: none.
    """

    port: int | None = None
    limits: MqttLimits = field(default_factory=MqttLimits)
    dataset: str | None = None
    routes: tuple[tuple[str, str], ...] = ()
    redis: str | None = None
    peer_port: int = 0
    peer_advertise: str | None = None
    lease: float = 3.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    websocket: bool = False
    password_file: Path | None = None
    acl_file: Path | None = None
    allow_anonymous: bool | None = None
    login_burst: int = 5
    login_rate: float = 0.2
    sys_interval: float = 10.0

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a certificate without its key (or the other way round), client
            certificates without TLS, TLS or WebSockets without an MQTT port, a login limit
            that could not work, a negative ``$SYS`` interval.
        """
        if self.port is None and (self.tls_cert is not None or self.websocket):
            raise ConfigError("--mqtt-tls-* and --mqtt-websocket need --mqtt-port")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("MQTT TLS needs both a certificate and its key (--mqtt-tls-*)")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigError("--mqtt-tls-client-ca needs --mqtt-tls-cert and --mqtt-tls-key")
        if self.login_burst < 1 or not 0 < self.login_rate < float("inf"):
            raise ConfigError(
                f"mqtt login limits must be a burst >= 1 and a rate > 0, not"
                f" {self.login_burst} and {self.login_rate}"
            )
        if not 0 <= self.sys_interval < float("inf"):
            raise ConfigError(f"--mqtt-sys-interval must be >= 0 s, not {self.sys_interval}")


@dataclass(frozen=True)
class RelayConfig:
    """How a relay runs, section by section (each checked when it was made).

    Attributes:
        upstream: where its data comes from.
        name: shown to the publisher and in logs; its name in a map (unique there).
        listening: where it serves subscribers.
        limits: what one connection, and all of them, may take.
        planning: how it plans coverage and hands out pushes.
        process: what it sets in its process.
        auth: how subscribers' tokens are checked (``fanout.auth``); None: no authentication,
            every connection is served.
        cluster: the map of responsibility it joins, if any.
        mqtt: its MQTT listener, if any.
    """

    upstream: Upstream
    name: str = "relay"
    listening: Listening = field(default_factory=Listening)
    limits: Limits = field(default_factory=Limits)
    planning: Planning = field(default_factory=Planning)
    process: Process = field(default_factory=Process)
    auth: AuthConfig | None = None
    cluster: Cluster = field(default_factory=Cluster)
    mqtt: Mqtt = field(default_factory=Mqtt)

    @property
    def policy(self) -> Policy:
        """The coverage policy the relay plans with: ``planning.policy`` if given, otherwise
        ``fit`` widening (``planner.IN_A_MAP``) in a map of responsibility and ``tiles`` alone
        (``Policy()``)."""
        if self.planning.policy is not None:
            return self.planning.policy
        return IN_A_MAP if self.cluster.registry is not None else Policy()
