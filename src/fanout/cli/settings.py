"""A command's flags from ``fanout.toml`` and the environment, read from its argparse definitions
(docs/configuration.md, "``[relay]``").

Each flag's ``dest`` is a key of the command's table (``--mqtt-port`` is ``[relay] mqtt_port``)
and an environment variable, ``FANOUT_`` and the table and the key in capitals
(``FANOUT_RELAY_MQTT_PORT``). A flag given wins over the variable, which wins over the file,
which wins over the flag's default. Values pass through the flag's own ``type`` and
``choices``; switches take booleans (``true``/``false`` in the environment), repeatable flags
lists (comma-separated in the environment). An unknown key or variable, or a wrong value, is a
``ConfigError`` naming it: a misspelt setting is never silently ignored.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fanout.errors import ConfigError

#: Where ``record_given`` notes the dests given on the command line.
GIVEN = "flags_given"
#: Flags that are no settings: what every command takes, and the file itself.
NOT_SETTINGS = frozenset({"help", "log_level", "log_format", "config"})
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_recording: dict[type[argparse.Action], type[argparse.Action]] = {}


def record_given(parser: argparse.ArgumentParser) -> None:
    """Make ``parser``'s actions note in the namespace (``GIVEN``) the flags given, so that
    ``resolve`` lets those win even when given their default value."""
    for action in settings_of(parser).values():
        cls = type(action)
        if cls not in _recording:
            _recording[cls] = _noting(cls)
        action.__class__ = _recording[cls]


def _noting(cls: type[argparse.Action]) -> type[argparse.Action]:
    """``cls`` that also notes its ``dest`` as given."""

    def __call__(  # noqa: N807 (the method it overrides)
        self: argparse.Action,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        cls.__call__(self, parser, namespace, values, option_string)
        given: set[str] = getattr(namespace, GIVEN, set())
        given.add(self.dest)
        setattr(namespace, GIVEN, given)

    return type(f"Noting{cls.__name__}", (cls,), {"__call__": __call__})


def settings_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """``parser``'s settings by ``dest``: its flags but ``NOT_SETTINGS``."""
    return {
        action.dest: action
        for action in parser._actions  # argparse lists its actions nowhere public
        if action.option_strings and action.dest not in NOT_SETTINGS
    }


def resolve(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    table: str,
    file: Path | None,
    environ: Mapping[str, str],
) -> argparse.Namespace:
    """``args`` with each setting not given as a flag taken from ``environ``, else from
    ``file``'s ``[table]``, else left at its default.

    Raises:
        ConfigError: the file cannot be read or parsed, or names an unknown key; a
            ``FANOUT_TABLE_*`` variable names no setting; a value is not of its flag's type.
    """
    actions = settings_of(parser)
    given: set[str] = getattr(args, GIVEN, set())
    sources = [  # highest precedence first; a flag given is the first
        dict.fromkeys(given),
        _from_environ(actions, table, environ),
        _from_file(actions, table, file),
    ]
    for group in parser._mutually_exclusive_groups:  # argparse names no public accessor
        _one_of(sorted(a.dest for a in group._group_actions), sources, table, file)
    for source in reversed(sources[1:]):
        for dest, value in source.items():
            if dest not in given:
                setattr(args, dest, value)
    return args


def _one_of(
    members: list[str], sources: list[dict[str, Any]], table: str, file: Path | None
) -> None:
    """Settings that exclude each other (``--publisher``, ``--upstream``): the first source
    naming one decides, the others' are dropped.

    Raises:
        ConfigError: one source names two of them.
    """
    where = ["the command line", f"$FANOUT_{table.upper()}_*", f"{file}: [{table}]"]
    for place, source in zip(where, sources, strict=True):
        named = [dest for dest in members if dest in source]
        if len(named) > 1:
            raise ConfigError(f"{place}: {' and '.join(named)} exclude each other: give one")
        if named:
            for other in sources:
                if other is not source:
                    for dest in members:
                        other.pop(dest, None)
            return


def _from_file(
    actions: dict[str, argparse.Action], table: str, file: Path | None
) -> dict[str, Any]:
    if file is None:
        return {}
    try:
        with file.open("rb") as stream:
            document = tomllib.load(stream)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    section = document.get(table, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{file}: [{table}] must be a table, not {type(section).__name__}")
    values = {}
    for key, value in section.items():
        where = f"{file}: {table}.{key}"
        if key not in actions:
            raise ConfigError(
                f"{where}: unknown setting (the keys are the flags' names, {_hint()})"
            )
        values[key] = _value(actions[key], value, where)
    return values


def _from_environ(
    actions: dict[str, argparse.Action], table: str, environ: Mapping[str, str]
) -> dict[str, Any]:
    prefix = f"FANOUT_{table.upper()}_"
    values = {}
    for name, text in environ.items():
        if not name.startswith(prefix):
            continue
        key = name[len(prefix) :].lower()
        if key not in actions:
            raise ConfigError(f"${name}: unknown setting (the names are the flags', {_hint()})")
        values[key] = _value(actions[key], _parse_text(actions[key], text, f"${name}"), f"${name}")
    return values


def _hint() -> str:
    return "e.g. --mqtt-port is mqtt_port, $FANOUT_RELAY_MQTT_PORT"


def _switch(action: argparse.Action) -> bool:
    return action.nargs == 0


def _repeated(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction)  # argparse names no public base


def _parse_text(action: argparse.Action, text: str, where: str) -> Any:
    """An environment variable's text as the file would give it."""
    if _switch(action):
        if text.strip().lower() in _TRUE:
            return True
        if text.strip().lower() in _FALSE:
            return False
        raise ConfigError(f"{where}: expected true or false, got {text!r}")
    if _repeated(action):
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _value(action: argparse.Action, value: Any, where: str) -> Any:
    """``value`` as the flag would have made it.

    Raises:
        ConfigError: it is not what the flag takes.
    """
    if _switch(action):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return value
        if value is not bool(action.const):  # a store_true (store_false) set to false (true)
            return action.default
        return action.const
    if _repeated(action):
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_one(action, item, where) for item in value]
    return _one(action, value, where)


def _one(action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(
            f"{where}: expected a value for {action.option_strings[0]}, got {value!r}"
        )
    convert = action.type if callable(action.type) else str
    try:
        converted = convert(str(value))
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        name = getattr(convert, "__name__", "value")
        raise ConfigError(f"{where}: invalid {name} value {value!r} ({exc})") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: {value!r} is not one of {choices}")
    return converted


def fields_given(
    args: argparse.Namespace, flags: list[tuple[str, type, float, str]], prefix: str = "--"
) -> dict[str, Any]:
    """The ``flags`` (flag, type, default, help) given, as a section's fields (the flag without
    ``prefix``, ``-`` as ``_``): those not given keep the section's defaults."""
    names = {
        flag[2:].replace("-", "_"): flag[len(prefix) :].replace("-", "_") for flag, *_ in flags
    }
    return {
        field: getattr(args, name)
        for name, field in names.items()
        if getattr(args, name) is not None
    }
