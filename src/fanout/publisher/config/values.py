"""Typed reading of parsed TOML, where every mistake names the key path of the value at fault.

``tomllib`` gives dicts, lists and scalars; the readers here check each value's type and range
and raise :class:`~fanout.errors.ConfigError` with a message ``PATH: PROBLEM``, where ``PATH`` is
spelled as in the file (``datasets.orders.schema.amount``, ``datasets.agents.index.columns[1]``,
quoted where TOML would quote: ``datasets.x.schema."my col"``). ``config.settings`` and
``config.datasets`` use them to read ``fanout.toml``.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Literal, NoReturn, TypeVar

from fanout.errors import ConfigError

T = TypeVar("T")
Table = dict[str, object]
Sign = Literal["any", ">= 0", "> 0"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),  # before int: bool is a subclass of int in Python, not in TOML
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
)


def child(path: str, key: str) -> str:
    """Return the key path of ``key`` in the table at ``path`` (``""``: the document)."""
    part = key if _BARE_KEY.fullmatch(key) else json.dumps(key)
    return f"{path}.{part}" if path else part


def fail(path: str, problem: str) -> NoReturn:
    """Raise the error for the value at ``path``.

    Raises:
        ConfigError: always, with the message ``PATH: PROBLEM``.
    """
    raise ConfigError(f"{path}: {problem}")


def described(value: object) -> str:
    """Return how a message shows a value: its TOML type, and the value itself if scalar."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    name = next((name for kind, name in _SCALAR_TYPES if isinstance(value, kind)), "a date/time")
    shown = repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, bool):
        shown = shown.lower()  # as TOML spells it
    return f"{name} ({shown})"


def alternatives(words: Sequence[str]) -> str:
    """Return ``a, b or c``."""
    return " or ".join(part for part in (", ".join(words[:-1]), words[-1]) if part)


def suggestion(word: str, choices: Sequence[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the choice closest to ``word``, or ``""``."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(table: Mapping[str, object], known: Sequence[str], path: str) -> None:
    """Reject the first key of ``table`` that is not ``known``, suggesting the closest.

    Raises:
        ConfigError: ``PATH.KEY: unknown key (did you mean ...?)``.
    """
    for key in table:
        if key not in known:
            hint = suggestion(key, known) or f" (known keys: {', '.join(known)})"
            fail(child(path, key), f"unknown key{hint}")


def required(table: Mapping[str, object], key: str, path: str, what: str) -> object:
    """Return ``table[key]``.

    Args:
        table: the table at ``path``.
        key: the key it must have.
        path: the table's key path.
        what: what the value should be, for the message when it is missing.

    Raises:
        ConfigError: ``PATH.KEY: missing: WHAT``.
    """
    if key not in table:
        fail(child(path, key), f"missing: {what}")
    return table[key]


def as_table(value: object, path: str) -> Table:
    """Return ``value`` if it is a table.

    Raises:
        ConfigError: it is not.
    """
    if not isinstance(value, dict):
        fail(path, f"expected a table, not {described(value)}")
    return value


def as_string(value: object, path: str) -> str:
    """Return ``value`` if it is a non-empty string.

    Raises:
        ConfigError: it is not.
    """
    if not isinstance(value, str):
        fail(path, f"expected a string, not {described(value)}")
    if not value:
        fail(path, "expected a non-empty string")
    return value


def as_integer(value: object, path: str, lowest: int | None = 0, highest: int | None = None) -> int:
    """Return ``value`` if it is an integer in ``[lowest, highest]`` (None: no bound).

    Raises:
        ConfigError: it is not an integer (a float or a boolean is not), or out of range.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        fail(path, f"expected an integer, not {described(value)}")
    if lowest is not None and value < lowest:
        fail(path, f"{value} is out of range: expected an integer >= {lowest}")
    if highest is not None and value > highest:
        fail(path, f"{value} is out of range: expected an integer <= {highest}")
    return value


def as_number(value: object, path: str, sign: Sign = ">= 0") -> float:
    """Return ``value`` as a float if it is a finite number of the given ``sign``.

    TOML integers count as numbers (``rate = 10``); booleans, ``inf`` and ``nan`` do not.

    Raises:
        ConfigError: it is not such a number.
    """
    if not isinstance(value, int | float) or isinstance(value, bool):
        fail(path, f"expected a number, not {described(value)}")
    result = float(value)
    if not math.isfinite(result):
        fail(path, f"expected a finite number, not {described(value)}")
    if (sign == ">= 0" and result < 0) or (sign == "> 0" and result <= 0):
        fail(path, f"{value} is out of range: expected a number {sign}")
    return result


def as_choice(value: object, choices: Mapping[str, T], path: str, noun: str = "") -> T:
    """Return the entry of ``choices`` named by the string ``value``.

    Args:
        value: the name.
        choices: name -> what it stands for; its order is the message's.
        path: the key path of ``value``.
        noun: what the name is, for the message (``type 'money' is not one of ...``).

    Raises:
        ConfigError: ``value`` is not a string or names no choice.
    """
    name = as_string(value, path)
    if name not in choices:
        named = f"{noun} {name!r}" if noun else repr(name)
        listed = ", ".join(choices)
        fail(path, f"{named} is not one of {listed}{suggestion(name, list(choices))}")
    return choices[name]


def as_kind_table(value: object, path: str) -> tuple[Table, str]:
    """Return a table with a ``kind``, also given as its shorthand, the kind alone.

    ``index = "sql"`` is ``index = { kind = "sql" }``.

    Returns:
        The table, and the key path that names its kind (for messages about the kind).

    Raises:
        ConfigError: ``value`` is neither a string nor a table, or the table has no ``kind``.
    """
    if isinstance(value, str):
        return {"kind": value}, path
    if not isinstance(value, dict):
        fail(path, f"expected a table or a kind name, not {described(value)}")
    required(value, "kind", path, "the kind")
    return value, f"{path}.kind"
