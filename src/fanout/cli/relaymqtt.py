"""``fanout relay``'s MQTT flags (docs/mqtt.md) and the ``relay.config.Mqtt`` they make."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.cli.settings import fields_given

if TYPE_CHECKING:
    from fanout.relay.config import Mqtt


def mqtt_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the MQTT group of flags to ``fanout relay``'s ``parser``."""
    mqtt = parser.add_argument_group("MQTT", "stock MQTT 3.1.1 and 5.0 clients (docs/mqtt.md)")
    mqtt.add_argument(
        "--mqtt-port",
        type=int,
        help="serve MQTT clients on this port (1883 is MQTT's; default: off)",
    )
    mqtt.add_argument(
        "--mqtt-dataset",
        help="the topic dataset retained MQTT messages are kept in (an ingest dataset with a"
        " 'payload' string column; default: none)",
    )
    mqtt.add_argument(
        "--mqtt-route",
        action="append",
        default=[],
        metavar="PREFIX=DATASET",
        help="topics starting with PREFIX are kept in DATASET (repeatable; longest prefix wins)",
    )
    mqtt.add_argument(
        "--mqtt-redis",
        type=host_port,
        metavar="HOST:PORT",
        help="a node of the Redis Cluster holding the shared match table: relays given the same"
        " cluster are one MQTT broker (default: none, this relay alone)",
    )
    mqtt.add_argument(
        "--mqtt-peer-port",
        type=int,
        default=0,
        help="port other relays forward MQTT messages to (default: 0, a free one)",
    )
    mqtt.add_argument(
        "--mqtt-peer-advertise",
        type=host_port,
        metavar="HOST:PORT",
        help="the address other relays reach --mqtt-peer-port at, for a relay behind NAT or a"
        " TCP proxy (default: HOST and the port as it listens)",
    )
    mqtt.add_argument(
        "--mqtt-lease",
        type=float,
        default=3.0,
        help="seconds a relay that died stays a subscriber in the shared table (default: 3)",
    )
    mqtt.add_argument("--mqtt-tls-cert", type=Path, help="serve MQTT over TLS: certificate (PEM)")
    mqtt.add_argument("--mqtt-tls-key", type=Path, help="serve MQTT over TLS: private key (PEM)")
    mqtt.add_argument(
        "--mqtt-tls-client-ca",
        type=Path,
        help="require MQTT clients' certificates, signed by an authority in this PEM file",
    )
    mqtt.add_argument(
        "--mqtt-websocket",
        action="store_true",
        help="also serve MQTT over WebSockets (subprotocol mqtt, path /mqtt) on the relay's"
        " port (ws://, or wss:// with --tls-cert)",
    )
    mqtt.add_argument(
        "--mqtt-sys-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="publish the broker's $SYS/broker/... topics this often, to clients whose rights"
        " allow $SYS/# (default: 10; 0: never)",
    )
    for flag, kind, default, what in MQTT_LIMITS:
        mqtt.add_argument(flag, type=kind, help=f"{what} (default: {default})")
    _mqtt_access_arguments(mqtt)


def _mqtt_access_arguments(mqtt: Any) -> None:
    """Who may log in to the MQTT port (docs/security.md, "MQTT")."""
    mqtt.add_argument(
        "--mqtt-password-file",
        type=Path,
        default=None,
        help="users who may log in, with their password hashes ('fanout passwd' writes it)",
    )
    mqtt.add_argument(
        "--mqtt-acl-file",
        type=Path,
        default=None,
        help="topics each user may read and write, in Mosquitto's ACL format (default: all)",
    )
    mqtt.add_argument(
        "--mqtt-allow-anonymous",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="admit MQTT clients without a user name and password (default: only when neither"
        " --mqtt-password-file nor --auth-key-file checks logins)",
    )
    mqtt.add_argument(
        "--mqtt-login-burst",
        type=int,
        default=5,
        help="failed MQTT logins from one address before it must wait (default: 5)",
    )
    mqtt.add_argument(
        "--mqtt-login-rate",
        type=float,
        default=0.2,
        help="failed MQTT logins per second one address may make after that (default: 0.2)",
    )


def host_port(text: str) -> str:
    """``HOST:PORT`` as given, once its port is a TCP port (an argparse type)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return text


#: The MQTT listener's limits as flags, like ``RELAY_LIMITS``: ``mqtt.actions.Limits``.
MQTT_LIMITS: list[tuple[str, type, float, str]] = [
    ("--mqtt-max-packet", int, 1 << 20, "largest MQTT packet accepted, in bytes"),
    ("--mqtt-max-queued", int, 1000, "QoS 1 messages kept per session while its client is away"),
    ("--mqtt-session-expiry", float, 3600.0, "longest a persistent session outlives its client"),
    ("--mqtt-max-subscriptions", int, 10_000, "topic filters one MQTT session may hold"),
    ("--mqtt-receive-maximum", int, 100, "QoS 1 and 2 messages in flight to one MQTT client"),
]


def mqtt_config(args: argparse.Namespace) -> Mqtt:
    """The MQTT section of the relay's configuration from its flags."""
    from fanout.mqtt.actions import Limits as MqttLimits  # noqa: PLC0415 (as cli/main.py)
    from fanout.mqtt.ingest import parse_route  # noqa: PLC0415 (as cli/main.py)
    from fanout.relay.config import Mqtt  # noqa: PLC0415 (as cli/main.py)

    return Mqtt(
        args.mqtt_port,
        MqttLimits(**fields_given(args, MQTT_LIMITS, "--mqtt-")),
        dataset=args.mqtt_dataset,
        routes=tuple(parse_route(route) for route in args.mqtt_route),
        redis=args.mqtt_redis,
        peer_port=args.mqtt_peer_port,
        peer_advertise=args.mqtt_peer_advertise,
        lease=args.mqtt_lease,
        tls_cert=args.mqtt_tls_cert,
        tls_key=args.mqtt_tls_key,
        tls_client_ca=args.mqtt_tls_client_ca,
        websocket=args.mqtt_websocket,
        password_file=args.mqtt_password_file,
        acl_file=args.mqtt_acl_file,
        allow_anonymous=args.mqtt_allow_anonymous,
        login_burst=args.mqtt_login_burst,
        login_rate=args.mqtt_login_rate,
        sys_interval=args.mqtt_sys_interval,
    )
