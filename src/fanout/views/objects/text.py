"""The PPS text format of objects: attribute lines written to an object and read back (US 9,026,567;
the QNX PPS Developer's Guide; docs/objects.md, "The text format"). Pure: text in, values out;
errors raise :class:`fanout.errors.InvalidWrite` naming the line. Rules:

1. An object reads as ``@name`` and one ``name:encoding:value`` line per attribute, in name
   order; the encoding is empty, ``n``, ``b``, ``json`` or ``b64``. A value holds no control
   character but tab.
2. A write is lines of ``[options]name:encoding:value`` or ``-name`` (empty lines ignored);
   options ``n`` (non-persistent) and ``q=D`` (quality 0-9, default 0).
3. A delta read gives ``@name`` and the changed lines, ``-name`` for deleted attributes, the
   directory's ``+@name`` and ``-@name`` notices, and ``|@name`` when the reader's queue
   overflowed (PPS's purge notification; a full read follows).
4. Attribute names are letters, digits, ``_`` and ``.``, starting with a letter or ``_``; at
   most 256 bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from fanout.errors import InvalidWrite

ENCODINGS = ("", "n", "b", "json", "b64")
MAX_QUALITY = 9
MAX_ATTRIBUTE_BYTES = 256

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


class Value(NamedTuple):
    """An attribute's value: its encoding tag and its text."""

    encoding: str
    text: str


class SetAttribute(NamedTuple):
    """One ``[options]name:encoding:value`` line of a write (rule 2)."""

    name: str
    value: Value
    quality: int = 0
    persist: bool = True


class DeleteAttribute(NamedTuple):
    """One ``-name`` line of a write (rule 2)."""

    name: str


WriteLine = SetAttribute | DeleteAttribute


class Created(NamedTuple):
    """``+@name``: an object was created (rule 3)."""

    name: str


class Deleted(NamedTuple):
    """``-@name``: an object was deleted (rule 3)."""

    name: str


class Changed(NamedTuple):
    """``@name`` and its changed attributes (None: deleted) in a delta read (rule 3)."""

    name: str
    attributes: Mapping[str, Value | None]


class Overflowed(NamedTuple):
    """``|@name``: this reader's queue of changes overflowed and was dropped (rule 3); what
    follows is a full read (PPS's purge notification, ``PPS_OVERFLOWED``)."""

    name: str


Notice = Created | Deleted | Changed | Overflowed


def check_name(name: str, where: str = "attribute name") -> str:
    """Return ``name`` if it is a valid attribute name (rule 4).

    Raises:
        InvalidWrite: it is not.
    """
    if not _NAME.fullmatch(name):
        raise InvalidWrite(
            f"{where} {name!r}: names are letters, digits, '_' and '.', starting with a letter"
            " or '_'"
        )
    if len(name.encode("utf-8")) > MAX_ATTRIBUTE_BYTES:
        raise InvalidWrite(f"{where} {name[:40]!r}...: longer than {MAX_ATTRIBUTE_BYTES} bytes")
    return name


def check_value(value: Value, where: str = "value") -> Value:
    """Return ``value`` if its text fits its encoding (rule 1).

    Raises:
        InvalidWrite: unknown encoding, a control character, or text the encoding refuses.
    """
    encoding, text = value
    if encoding not in ENCODINGS:
        known = ", ".join(repr(e) for e in ENCODINGS)
        raise InvalidWrite(f"{where}: unknown encoding {encoding!r} (known: {known})")
    control = _VALUE_CONTROL.search(text)
    if control:
        raise InvalidWrite(
            f"{where}: control character U+{ord(control.group()):04X} at position"
            f" {control.start()}; a value runs to the end of its line"
        )
    problem = _encoding_problem(encoding, text)
    if problem:
        raise InvalidWrite(f"{where}: {problem}")
    return value


def _encoding_problem(encoding: str, text: str) -> str | None:
    if encoding == "n":
        if not _NUMBER.fullmatch(text) or not math.isfinite(float(text)):
            return f"{text!r} is not a finite number (encoding 'n')"
    elif encoding == "b":
        if text not in ("true", "false"):
            return f"{text!r} is not true or false (encoding 'b')"
    elif encoding == "json":
        try:
            json.loads(text)
        except ValueError:
            return f"{text!r} is not JSON (encoding 'json')"
    elif encoding == "b64":
        try:
            base64.b64decode(text, validate=True)
        except binascii.Error:
            return f"{text!r} is not base64 (encoding 'b64')"
    return None


def parse_write(text: str) -> list[WriteLine]:
    """Parse the lines of one write to an object (rule 2), all or nothing.

    Args:
        text: e.g. ``"speed:n:42\\n[q=3,n]state::moving\\n-error\\n"``.

    Returns:
        The lines in order; empty lines dropped.

    Raises:
        InvalidWrite: a line is malformed (the message gives its number); nothing is returned.
    """
    lines: list[WriteLine] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if line:
            lines.append(_write_line(line, f"line {number}"))
    if not lines:
        raise InvalidWrite("a write needs at least one line (name:encoding:value or -name)")
    return lines


def _write_line(line: str, where: str) -> WriteLine:
    if line.startswith("-"):
        return DeleteAttribute(check_name(line[1:], f"{where}: attribute name"))
    quality, persist = 0, True
    if line.startswith("["):
        options, bracket, rest = line[1:].partition("]")
        if not bracket:
            raise InvalidWrite(f"{where}: '[' opens options that no ']' closes: {line!r}")
        quality, persist = _options(options, where)
        line = rest
    name, colon, rest = line.partition(":")
    encoding, colon2, text = rest.partition(":")
    if not (colon and colon2):
        raise InvalidWrite(
            f"{where}: expected name:encoding:value (e.g. speed:n:42 or state::on), or -name,"
            f" got {line!r}"
        )
    value = check_value(Value(encoding, text), f"{where}: attribute {name!r}")
    return SetAttribute(check_name(name, f"{where}: attribute name"), value, quality, persist)


def _options(options: str, where: str) -> tuple[int, bool]:
    quality, persist = 0, True
    seen: set[str] = set()
    for option in options.split(","):
        key = option.partition("=")[0]
        if key in seen:
            raise InvalidWrite(f"{where}: option {key!r} given twice")
        seen.add(key)
        if option == "n":
            persist = False
        elif key == "q":
            digits = option[2:]
            if not digits.isdigit() or not 0 <= int(digits) <= MAX_QUALITY:
                raise InvalidWrite(
                    f"{where}: quality {digits!r} must be an integer from 0 to {MAX_QUALITY}"
                )
            quality = int(digits)
        else:
            raise InvalidWrite(
                f"{where}: unknown option {option!r} (known: n for non-persistent, q=0..9)"
            )
    return quality, persist


def format_value_line(name: str, value: Value) -> str:
    """One attribute as ``name:encoding:value`` (rule 1), without the newline."""
    return f"{name}:{value.encoding}:{value.text}"


def format_write(lines: Iterable[WriteLine]) -> str:
    """Lines of a write as text that :func:`parse_write` reads back to the same lines."""
    out: list[str] = []
    for line in lines:
        if isinstance(line, DeleteAttribute):
            out.append(f"-{line.name}")
            continue
        options = [
            *([] if line.persist else ["n"]),
            *([f"q={line.quality}"] if line.quality else []),
        ]
        prefix = f"[{','.join(options)}]" if options else ""
        out.append(prefix + format_value_line(line.name, line.value))
    return "".join(f"{line}\n" for line in out)


def format_object(name: str, attributes: Mapping[str, Value]) -> str:
    """One object in full (rule 1): ``@name`` then its attributes in name order."""
    lines = [f"@{name}"]
    lines += [format_value_line(attr, attributes[attr]) for attr in sorted(attributes)]
    return "".join(f"{line}\n" for line in lines)


def format_notices(notices: Iterable[Notice]) -> str:
    """Notices of a delta read as text (rule 3); :func:`parse_notices` reads them back."""
    out: list[str] = []
    for notice in notices:
        match notice:
            case Created(name):
                out.append(f"+@{name}\n")
            case Deleted(name):
                out.append(f"-@{name}\n")
            case Overflowed(name):
                out.append(f"|@{name}\n")
            case Changed(name, attributes):
                out.append(f"@{name}\n")
                for attr in sorted(attributes):
                    value = attributes[attr]
                    line = f"-{attr}" if value is None else format_value_line(attr, value)
                    out.append(f"{line}\n")
    return "".join(out)


def parse_notices(text: str) -> list[Notice]:
    """Read the text of full or delta reads back into notices (rules 1 and 3).

    A full read of an object parses as one :class:`Changed` holding every attribute.

    Raises:
        InvalidWrite: a line is not a header, a notice or an attribute line after a header.
    """
    notices: list[Notice] = []
    current: dict[str, Value | None] | None = None
    for number, line in enumerate(text.split("\n"), start=1):
        where = f"line {number}"
        if not line:
            continue
        if line.startswith(("+@", "-@", "|@")):
            name = line[2:]
            notices.append(
                Created(name)
                if line[0] == "+"
                else Deleted(name)
                if line[0] == "-"
                else Overflowed(name)
            )
            current = None
        elif line.startswith("@"):
            current = {}
            notices.append(Changed(line[1:], current))
        elif current is None:
            raise InvalidWrite(f"{where}: an attribute line before any @name header: {line!r}")
        elif line.startswith("-"):
            current[check_name(line[1:], where)] = None
        else:
            name, _, rest = line.partition(":")
            encoding, _, value = rest.partition(":")
            current[check_name(name, where)] = check_value(Value(encoding, value), where)
    return notices
