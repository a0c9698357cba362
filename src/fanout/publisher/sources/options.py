"""The options Spark hands fanout's Python data sources: strings, their names in any case."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fanout.errors import ConfigError


def lowered(options: Mapping[str, str], source: str, required: Sequence[str]) -> dict[str, str]:
    """The options by their lower-cased names.

    Raises:
        ConfigError: one of ``required`` (lower-case names) is missing.
    """
    found = {name.lower(): value for name, value in options.items()}
    missing = [name for name in required if name not in found]
    if missing:
        raise ConfigError(f"{source}: option {missing[0]!r} is required")
    return found


def max_rows(options: Mapping[str, str], source: str, default: int) -> int:
    """``maxRowsPerBatch`` (admission control) of ``lowered`` options: a positive count.

    Raises:
        ConfigError: it is not one.
    """
    rows = options.get("maxrowsperbatch", str(default))
    if not rows.isdigit() or int(rows) < 1:
        raise ConfigError(f"{source}: maxRowsPerBatch={rows!r} is not a positive count")
    return int(rows)
