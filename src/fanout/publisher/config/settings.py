"""``fanout.toml``: the publisher's datasets and settings, read and checked.

The file's tables (``[publisher]``, ``[spark]``, ``[auth]``, ``[bus]``, ``[datasets.NAME]``;
``[cluster]`` and ``[relay]`` are the relays') are documented in docs/configuration.md. Every
mistake is a :class:`~fanout.errors.ConfigError` whose message starts with the file and the key
path at fault (``fanout.toml: datasets.orders.key: 'oid' is not a column of the schema``).
Nothing is guessed: unknown keys are errors (with a suggestion), numbers must be numbers, and
every column a setting names must be declared.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fanout.auth import AuthConfig
from fanout.errors import ConfigError
from fanout.publisher.config.datasets import read_datasets
from fanout.publisher.config.values import (
    Table,
    as_integer,
    as_number,
    as_string,
    as_table,
    check_keys,
    child,
    described,
    fail,
    required,
)
from fanout.publisher.datasets import Dataset, agents
from fanout.publisher.log import check_log_url
from fanout.publisher.mirror import MAX_ROWS as MIRROR_ROWS
from fanout.publisher.relaytable import MAX_PRIMITIVES
from fanout.publisher.sources.simulation import SimulationParams
from fanout.wire.bus import FRAGMENT_BYTES, InvalidSubject, check_name


@dataclass(frozen=True)
class BusSettings:
    """The ``[bus]`` table: the NATS server the publisher connects to as the database connector
    (``publisher.busconnector``; ``docs/caches.md``).

    Attributes:
        url: ``nats://host:port`` (several, comma-separated, for a cluster).
        domain: the data source domain: one subject token (``wire.bus`` rule 1).
        fragment_bytes: the largest piece of an object's state in one message.
    """

    url: str
    domain: str = "fanout"
    fragment_bytes: int = FRAGMENT_BYTES


@dataclass(frozen=True)
class SparkSettings:
    """The ``[spark]`` table: the publisher's Spark session (``publisher.spark``).

    Attributes:
        ui: the Spark UI on or off; None: on with a cluster master, off embedded (``local``).
        conf: Spark settings (``spark.*``) over fanout's defaults; what Spark was given before
            (``spark-submit --conf``, ``spark-defaults.conf``) wins over them.
    """

    ui: bool | None = None
    conf: dict[str, str] = field(default_factory=dict)


def builtin_datasets() -> dict[str, Dataset]:
    """Return the datasets served when ``fanout.toml`` declares none: the simulated ``agents``."""
    return {"agents": agents(SimulationParams())}


@dataclass(frozen=True)
class PublisherSettings:
    """Everything ``fanout.toml`` configures, with the command line's defaults.

    Attributes:
        datasets: name -> dataset, in declaration order (the built-in ``agents`` if none).
        host, port: where the control plane listens (port 0: any free port).
        master: Spark master URL; None uses ``local[*]`` (or spark-submit's).
        state_dir: checkpoint and stream identity, relative to the working directory.
        trigger: seconds between micro-batch starts (0: as fast as Spark goes).
        log: URL of the log of delivered batches (``sqlite:///var/publisher/log.db``,
            ``postgresql://host/db``); None: a SQLite file ``log.db`` in ``state_dir``.
        retention_seconds: how long logged batches are kept (beyond what holders still need).
        mirror_rows: datasets of up to this many live rows are mirrored in the driver for
            snapshots (``publisher.mirror``); 0: snapshots always read Spark's state store.
        max_primitives: upstream primitives one relay may hold at once; an ``Acquire``
            beyond them is refused (``publisher.relaytable``).
        trim_every: seconds between two ``malloc_trim(0)`` in the driver (``fanout.allocator``;
            0: never): its threads (Py4J's, the control plane's) left glibc's arenas holding
            free memory that grew with the run (docs/benchmarks/memory.md).
        auth: how connections' tokens are checked (``fanout.auth``); None: no
            authentication.
        tls_cert, tls_key: PEM files: serve ``wss://`` with them (None: plain ``ws://``).
        bus: the subject bus the datasets with ``bus`` are published on (None: none).
        spark: the Spark UI and settings (``[spark]``).
    """

    datasets: dict[str, Dataset] = field(default_factory=builtin_datasets)
    host: str = "127.0.0.1"
    port: int = 7700
    master: str | None = None
    state_dir: Path = Path("var/publisher")
    trigger: float = 0.0
    log: str | None = None
    retention_seconds: float = 600.0
    mirror_rows: int = MIRROR_ROWS
    max_primitives: int = MAX_PRIMITIVES
    trim_every: float = 10.0
    auth: AuthConfig | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    bus: BusSettings | None = None
    spark: SparkSettings = field(default_factory=SparkSettings)

    def log_url(self) -> str:
        """The log's URL: ``log``, or the SQLite file ``log.db`` in the state directory."""
        return self.log or f"sqlite:///{(self.state_dir / 'log.db').resolve()}"

    def override(self, **flags: Any) -> PublisherSettings:
        """Return these settings with the command-line flags that were given replacing them.

        Args:
            flags: setting name -> the flag's value; None means the flag was not given.

        Returns:
            The settings, the file's values kept where no flag was given.

        Raises:
            TypeError: a flag names no setting.
        """
        return replace(self, **{name: value for name, value in flags.items() if value is not None})


def load_config(path: Path) -> PublisherSettings:
    """Read and check a ``fanout.toml`` file.

    Args:
        path: the file.

    Returns:
        The settings it declares, defaults filled in.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or declares something invalid; the
            message names the file and the key at fault.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    return parse_config(text, str(path))


def parse_config(text: str, source: str = "fanout.toml") -> PublisherSettings:
    """Parse and check the text of a ``fanout.toml``.

    Args:
        text: the TOML text.
        source: what error messages call the text (the file's path).

    Returns:
        The settings it declares, defaults filled in.

    Raises:
        ConfigError: the text is not TOML (the message has tomllib's line and column) or declares
            something invalid (the message has the key path, e.g. ``datasets.orders.key``).
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    try:
        return _settings(document)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _settings(document: Table) -> PublisherSettings:
    # [cluster] and [relay] are the relays' (``fanout relay --config``: ``cluster.settings``,
    # ``cli.settings``).
    check_keys(document, ("publisher", "spark", "datasets", "auth", "bus", "cluster", "relay"), "")
    declared = read_datasets(document["datasets"]) if "datasets" in document else {}
    settings = PublisherSettings(datasets=declared or builtin_datasets())
    if "auth" in document:
        settings = replace(settings, auth=_auth(document["auth"]))
    if "bus" in document:
        settings = replace(settings, bus=_bus(document["bus"]))
    if "spark" in document:
        settings = replace(settings, spark=_spark(document["spark"]))
    opted = [name for name, dataset in settings.datasets.items() if dataset.bus is not None]
    if opted and settings.bus is None:
        fail(
            f"datasets.{opted[0]}.bus",
            'publishing on the bus needs a [bus] table with the server, e.g. url = "nats://127.0.0.1:4222"',
        )
    if "publisher" not in document:
        return settings
    return replace(settings, **_publisher(document["publisher"]))


def _auth(value: object) -> AuthConfig:
    """The ``[auth]`` table: ``algorithm``, ``key`` or ``key_file``, ``audience``, ``issuer``,
    ``leeway``."""
    table = as_table(value, "auth")
    check_keys(table, ("algorithm", "key", "key_file", "audience", "issuer", "leeway"), "auth")
    if ("key" in table) == ("key_file" in table):
        fail("auth", "give the key (key = ...) or the file holding it (key_file = ...), one")
    options: dict[str, Any] = {
        name: as_string(table[name], f"auth.{name}")
        for name in ("audience", "issuer")
        if name in table
    }
    if "leeway" in table:
        options["leeway"] = as_number(table["leeway"], "auth.leeway")
    algorithm = as_string(table.get("algorithm", "HS256"), "auth.algorithm")
    try:
        if "key_file" in table:
            return AuthConfig.from_file(
                algorithm, Path(as_string(table["key_file"], "auth.key_file")), **options
            )
        return AuthConfig(algorithm, as_string(table["key"], "auth.key"), **options)  # type: ignore[arg-type]  # checked there
    except ConfigError as exc:
        fail("auth", str(exc))


def _bus(value: object) -> BusSettings:
    """Return the ``[bus]`` table's settings."""
    table = as_table(value, "bus")
    check_keys(table, ("url", "domain", "fragment_bytes"), "bus")
    url = as_string(required(table, "url", "bus", 'the NATS server, "nats://host:port"'), "bus.url")
    if not all(part.strip().startswith(("nats://", "tls://")) for part in url.split(",")):
        fail("bus.url", f"expected nats://host:port (or tls://), not {url!r}")
    domain = as_string(table.get("domain", "fanout"), "bus.domain")
    try:
        check_name(domain, "the domain")
    except InvalidSubject as exc:
        fail("bus.domain", str(exc))
    size = as_integer(
        table.get("fragment_bytes", FRAGMENT_BYTES), "bus.fragment_bytes", 64, 1 << 20
    )
    return BusSettings(url=url, domain=domain, fragment_bytes=size)


def _spark(value: object) -> SparkSettings:
    """Return the ``[spark]`` table's settings: ``ui`` and ``conf``."""
    table = as_table(value, "spark")
    check_keys(table, ("ui", "conf"), "spark")
    ui = table.get("ui")
    if ui is not None and not isinstance(ui, bool):
        fail("spark.ui", f"expected true or false, not {described(ui)}")
    conf = _spark_conf(as_table(table.get("conf", {}), "spark.conf"), "spark.conf", "")
    if "spark.master" in conf:
        fail(child("spark.conf", "spark.master"), "the master is [publisher] master (or --master)")
    if ui is not None and "spark.ui.enabled" in conf:
        fail(child("spark.conf", "spark.ui.enabled"), "spark.ui says it already: give one of them")
    return SparkSettings(ui=ui, conf=conf)


def _spark_conf(table: Table, path: str, prefix: str) -> dict[str, str]:
    """Spark settings by key: quoted keys (``"spark.sql.shuffle.partitions" = 8``) or dotted
    ones, which TOML reads as tables nested in ``table`` and are joined again with dots."""
    conf: dict[str, str] = {}
    for name, raw in table.items():
        key = f"{prefix}.{name}" if prefix else name
        if isinstance(raw, dict):
            conf |= _spark_conf(raw, path, key)
        elif not isinstance(raw, str | int | float):
            fail(child(path, key), f"expected a string, number or boolean, not {described(raw)}")
        elif not key.startswith("spark."):
            fail(child(path, key), "Spark's settings start with spark.")
        else:  # Spark spells booleans true/false
            conf[key] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    return conf


# -- [publisher] ---------------------------------------------------------------------------------


def _log_url(value: object, path: str) -> str:
    url = as_string(value, path)
    try:
        check_log_url(url)
    except ConfigError as exc:
        fail(path, str(exc))
    return url


# Readers return Any: each value goes to the PublisherSettings field of the same name.
_PUBLISHER_KEYS: dict[str, Callable[[object, str], Any]] = {
    "host": as_string,
    "port": lambda value, path: as_integer(value, path, 0, 65535),
    "master": as_string,
    "state_dir": lambda value, path: Path(as_string(value, path)),
    "trigger": as_number,
    "log": _log_url,
    "retention_seconds": lambda value, path: as_number(value, path, "> 0"),
    "mirror_rows": lambda value, path: as_integer(value, path, 0, None),
    "max_primitives": lambda value, path: as_integer(value, path, 1, None),
    "trim_every": as_number,
    "tls_cert": lambda value, path: Path(as_string(value, path)),
    "tls_key": lambda value, path: Path(as_string(value, path)),
}


def _publisher(value: object) -> dict[str, Any]:
    """Return the ``[publisher]`` table's settings, by ``PublisherSettings`` field name."""
    table = as_table(value, "publisher")
    check_keys(table, list(_PUBLISHER_KEYS), "publisher")
    return {key: _PUBLISHER_KEYS[key](raw, f"publisher.{key}") for key, raw in table.items()}
