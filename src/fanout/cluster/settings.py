"""The relay's ``cluster`` section (:class:`Cluster`, a field of ``relay.config.RelayConfig``)
and the ``[cluster]`` table of ``fanout.toml`` it is read from (``fanout relay --config``; its
flags override the file): how a relay joins the map of responsibility. The section is the
cluster's own, so the relay cluster reads its settings without importing the relay's
configuration. Its keys are documented in docs/configuration.md, "``[cluster]``"; the publisher
leaves this table to the relays.

Every mistake is a ``ConfigError`` naming the file and the key (``fanout.toml: cluster.lease:
...``) or, for the section, the flag.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fanout.cluster.balance import DEFAULT_DWELL, Thresholds
from fanout.cluster.responsibility import DEFAULT_SIDE
from fanout.errors import ConfigError

KEYS = (
    "registry",
    "lease",
    "side",
    "advertise",
    "policy",
    "split_above",
    "merge_below",
    "split_dwell",
    "standby",
    "split_command",
    "split_wait",
)


#: What a relay of a map does with a subscription another relay is responsible for.
POLICIES = ("redirect", "forward")


@dataclass(frozen=True)
class Cluster:
    """The map of responsibility the relay shares with others (``fanout.cluster``), if any.

    Attributes:
        registry: ``redis://host:port`` of a Redis Cluster node holding the map of
            responsibility shared by relays: this relay joins it under its name (unique in
            the cluster) and redirects new subscriptions another relay is responsible for;
            None: the relay works alone.
        policy: what a relay of a map does with a subscription another relay is responsible
            for: ``redirect`` it there (a new one), or ``forward``: serve it here, acquiring the
            parts other relays are responsible for from them (``cluster.upstreams``); a relay
            that forwards also serves relays.
        lease: seconds a relay that died stays in the map.
        side: side of the grid of cells space datasets are split into, world units (the same
            on every relay of a cluster).
        advertise: the URL subscribers are redirected to for this relay (default
            ``ws[s]://host:port`` as it listens).
        split_above, merge_below, split_dwell: when a relay of a map hands part of its
            responsibility to another and hands it back (``cluster.balance``): figure
            (``subscribers``, ``pushes`` a second, ``cpu`` share, ``rows``) -> threshold;
            both empty (the default): never.
        standby: join the map owning nothing until parts are handed here by a split.
        split_command: shell command starting a standby relay to split to when none is idle;
            ``{name}`` in it becomes a fresh name (None: split only to idle standbys).
        split_wait: seconds to wait for the relay ``split_command`` started to join the map.
    """

    registry: str | None = None
    policy: str = "redirect"
    lease: float = 3.0
    side: float = DEFAULT_SIDE
    advertise: str | None = None
    split_above: Mapping[str, float] = field(default_factory=dict)
    merge_below: Mapping[str, float] = field(default_factory=dict)
    split_dwell: float = DEFAULT_DWELL
    standby: bool = False
    split_command: str | None = None
    split_wait: float = 30.0

    @property
    def thresholds(self) -> Thresholds:
        """When this relay splits and merges (``cluster.balance``)."""
        return Thresholds(dict(self.split_above), dict(self.merge_below), self.split_dwell)

    @property
    def forwarding(self) -> bool:
        """Whether the relay is in a map and serves others' parts itself (``forward``)."""
        return self.registry is not None and self.policy == "forward"

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: a limit that could not work, or splitting that could not, named as the
            flag is.
        """
        if self.policy not in POLICIES:
            raise ConfigError(
                f"registry_policy (--registry-policy) must be one of {', '.join(POLICIES)},"
                f" not {self.policy!r}"
            )
        for name, value, wanted in (
            ("registry_lease", self.lease, "> 0 seconds"),
            ("registry_side", self.side, "> 0 world units"),
            ("split_wait", self.split_wait, "> 0 seconds"),
        ):
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, not {value}")
            if not value > 0:
                raise ConfigError(f"{name} must be {wanted}, not {value}")
        if self.registry is not None:
            registry_address(self.registry)
        try:
            thresholds = self.thresholds
        except ValueError as exc:
            raise ConfigError(f"split and merge (--split-above, --merge-below): {exc}") from None
        if self.registry is None and (thresholds.on or self.standby):
            raise ConfigError(
                "splitting, merging and --standby need a map of responsibility (--registry)"
            )
        if self.policy == "forward":
            # A forwarding relay keeps serving its subscribers after a split (only the upstream
            # work of the parts moves), so its pushes, CPU and rows hardly fall: a threshold on
            # them would split again at every dwell.
            named = sorted({*thresholds.split_above, *thresholds.merge_below} - {"subscribers"})
            if named:
                raise ConfigError(
                    "split and merge under --registry-policy forward measure subscribers only"
                    f" (not {', '.join(named)}): a split moves the parts' upstream work, not"
                    " the subscribers' connections, so this relay's pushes, cpu and rows"
                    " would not fall with it"
                )


@dataclass(frozen=True)
class ClusterSettings:
    """What ``[cluster]`` says; None where it says nothing."""

    registry: str | None = None
    lease: float | None = None
    side: float | None = None
    advertise: str | None = None
    policy: str | None = None
    split_above: dict[str, float] | None = None
    merge_below: dict[str, float] | None = None
    split_dwell: float | None = None
    standby: bool | None = None
    split_command: str | None = None
    split_wait: float | None = None


def load_cluster(path: Path) -> ClusterSettings:
    """The ``[cluster]`` table of the file at ``path`` (empty settings if it has none).

    Raises:
        ConfigError: the file cannot be read or is not TOML, or the table holds an unknown key
            or a value of the wrong kind; the message names the file and the key.
    """
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    try:
        return read_cluster(document.get("cluster", {}))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_cluster(table: object) -> ClusterSettings:
    """Check and read a ``[cluster]`` table.

    Raises:
        ConfigError: ``cluster.KEY: ...`` for an unknown key or a bad value.
    """
    if not isinstance(table, dict):
        raise ConfigError("cluster: must be a table ([cluster])")
    for key in table:
        if key not in KEYS:
            raise ConfigError(f"cluster.{key}: unknown key (known keys: {', '.join(KEYS)})")
    texts = {key: _text(table, key) for key in ("registry", "advertise", "policy")}
    numbers = {key: _positive(table, key) for key in ("lease", "side", "split_dwell", "split_wait")}
    standby = table.get("standby")
    if standby is not None and not isinstance(standby, bool):
        raise ConfigError(f"cluster.standby: must be true or false, not {standby!r}")
    return ClusterSettings(
        texts["registry"],
        numbers["lease"],
        numbers["side"],
        texts["advertise"],
        texts["policy"],
        _figures(table, "split_above"),
        _figures(table, "merge_below"),
        numbers["split_dwell"],
        standby,
        _text(table, "split_command"),
        numbers["split_wait"],
    )


def _figures(table: dict[str, object], key: str) -> dict[str, float] | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"cluster.{key}: must be a table of figures, e.g. {{ cpu = 0.8 }}")
    figures = {}
    for figure, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ConfigError(f"cluster.{key}.{figure}: must be a number, not {number!r}")
        figures[figure] = float(number)
    return figures


def parse_figures(items: list[str] | None, flag: str) -> dict[str, float] | None:
    """``FIGURE=VALUE`` flags (``--split-above cpu=0.8``) as a table; None if none was given.

    Raises:
        ConfigError: an item is not ``FIGURE=NUMBER``.
    """
    if not items:
        return None
    figures = {}
    for item in items:
        figure, _, number = item.partition("=")
        try:
            figures[figure.strip()] = float(number)
        except ValueError:
            raise ConfigError(f"{flag}: {item!r} is not FIGURE=NUMBER (e.g. cpu=0.8)") from None
    return figures


def _text(table: dict[str, object], key: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"cluster.{key}: must be a non-empty string, not {value!r}")
    return value


def _positive(table: dict[str, object], key: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"cluster.{key}: must be a number, not {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"cluster.{key}: must be > 0, not {value}")
    return float(value)


def registry_address(address: str) -> tuple[str, int]:
    """(host, port) of a registry given as ``redis://host:port`` or ``host:port``.

    Raises:
        ConfigError: it is not of that form.
    """
    bare = address.removeprefix("redis://").rstrip("/")
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"a registry is redis://HOST:PORT (a Redis Cluster node), not {address!r}"
        )
    return host, int(port)
