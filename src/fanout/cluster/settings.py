"""The ``[cluster]`` table of ``fanout.toml``: how a relay joins the map of responsibility
(``fanout relay --config fanout.toml``; its flags override the file). Its keys are documented
in docs/configuration.md, "``[cluster]``"; the publisher leaves this table to the relays.

Every mistake is a ``ConfigError`` naming the file and the key (``fanout.toml: cluster.lease:
...``).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

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
