"""QNX PPS object paths and pathname open options: the rules of the text (US 9,026,567; the QNX PPS
Developer's Guide; docs/objects.md, "Open options"). Errors raise
:class:`fanout.errors.InvalidView` naming the problem and its position. Rules:

1. A path is absolute; segments are non-empty, not ``.`` or ``..``, without control characters,
   at most 508 UTF-8 bytes each.
2. Names starting with ``.`` are special; ``.all`` is the one a view names, last.
3. Options follow the first ``?``, comma-separated, each at most once: ``delta``, ``deltadir``
   (on ``.all``, without ``delta`` or ``f=``), ``wait``, ``nopersist``, ``critical``,
   ``backlog=KB``, ``notify=id:value``, ``f=spec+...``. ``server``, PPS server options and
   anything unknown are refused by name, with the reason.
4. ``f=`` specs: an attribute name, ``-name``, or ``name OP value`` (``<``, ``<=``, ``>``,
   ``>=``, ``=``, ``==``, ``!=``); a ``long long`` integer compares as a number, anything else as
   a string (``=``, ``==``, ``!=`` only); ``\\+`` and ``\\\\`` escape.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from fanout.errors import InvalidView

ALL_OBJECT = ".all"
MAX_NAME_BYTES = 508
LONG_LONG_MIN = -(2**63)
LONG_LONG_MAX = 2**63 - 1

FLAG_OPTIONS = ("delta", "deltadir", "wait", "nopersist", "critical")
VALUE_OPTIONS = ("f", "backlog", "notify")
SERVER_OPTIONS = ("cred", "crypt", "flow", "opens", "reflect", "verbose")
#: PPS options fanout refuses, and why (docs/objects.md, "Open options").
REFUSED_OPTIONS = {
    "server": "PPS server objects are point-to-point messages between one server and its"
    " clients, neither persistent nor shared; an objects dataset is shared state, kept by the"
    " publisher",
}
#: The largest ``backlog=`` in KB (1 GiB).
MAX_BACKLOG_KB = 1 << 20

_SPEC = re.compile(r"(-?)([A-Za-z_][A-Za-z0-9_.]*)(?:(<=|>=|==|!=|<|>|=)(.*))?", re.DOTALL)
_INTEGER = re.compile(r"-?[0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class AttributeFilter(NamedTuple):
    """One ``f=`` value comparison, e.g. ``attr<37`` (PPS "Filtering notifications")."""

    name: str
    op: str
    """One of ``<``, ``<=``, ``>``, ``>=``, ``=``, ``!=`` (``==`` is read as ``=``)."""
    value: int | str
    """An int when the text is a ``long long`` integer, else the (unescaped) string."""

    def __str__(self) -> str:
        """The spec as ``f=`` text, escaped so that it parses back to itself."""
        value = self.value if isinstance(self.value, int) else escape_value(self.value)
        return f"{self.name}{self.op}{value}"


class ParsedPath(NamedTuple):
    """Everything an :class:`~fanout.views.objects.ObjectPath` text says."""

    object_path: str
    """The path without options, e.g. ``/pps/media/.all``."""
    directory: str
    object: str | None
    """The object's name, None for ``.all``."""
    flags: frozenset[str]
    """Which of ``FLAG_OPTIONS`` are set."""
    backlog: int | None
    """Bytes a delta reader's queue may hold (``backlog=KB``); None for the default."""
    notify: str | None
    """The ``id:value`` of a ``notify=`` option (a mount's notification group)."""
    attributes: frozenset[str] | None
    """Attribute names ``f=`` selects, None for all attributes."""
    filters: tuple[AttributeFilter, ...]
    """``f=`` value comparisons; an object passes when any holds (or when there are none)."""
    delivery_options: tuple[str, ...]
    """The option texts other than ``f=``, in order, for rebuilding a path."""


def escape_value(value: str) -> str:
    """Escape ``\\`` and ``+`` so a string value survives inside ``f=``."""
    return value.replace("\\", "\\\\").replace("+", "\\+")


def parse_path(text: object) -> ParsedPath:
    """Validate a PPS path with open options and split it into its parts.

    Args:
        text: e.g. ``/pps/media/PlayCurrent``, ``/pps/media/.all?wait``,
            ``/pps/objname?delta,f=attr1<37``.

    Returns:
        The parsed path.

    Raises:
        InvalidView: the text breaks one of the module's rules; the message names the problem
            and the character position.
    """
    if not isinstance(text, str):
        raise InvalidView(f"object path must be a string, got {type(text).__name__}")
    path, mark, options = text.partition("?")
    directory, name = _parse_segments(text, path)
    if mark and not options:
        raise InvalidView(f"object path {text!r} has an empty option list after '?'")
    flags: set[str] = set()
    values: dict[str, str] = {}
    delivery: list[str] = []
    position = len(path) + 1
    specs_position = 0
    for option in options.split(",") if options else []:
        key = _read_option(text, option, position, flags, values)
        if key == "f":
            specs_position = position + len("f=")
        else:
            delivery.append(option)
        position += len(option) + 1
    _check_deltadir(text, name, flags, values)
    attributes, filters = _parse_specs(text, values.get("f"), specs_position)
    backlog = _backlog(text, values.get("backlog"))
    notify = values.get("notify")
    if notify is not None:
        _check_notify(text, notify)
    return ParsedPath(
        path,
        directory,
        name,
        frozenset(flags),
        backlog,
        notify,
        attributes,
        filters,
        tuple(delivery),
    )


def _check_deltadir(text: str, name: str | None, flags: set[str], values: dict[str, str]) -> None:
    if "deltadir" not in flags:
        return
    if name is not None:
        raise InvalidView(
            f"object path {text!r}: 'deltadir' is valid only on the special object '.all'"
        )
    if "delta" in flags or "f" in values:
        raise InvalidView(
            f"object path {text!r}: 'deltadir' gives object names only; it takes neither"
            " 'delta' nor 'f='"
        )


def _parse_segments(text: str, path: str) -> tuple[str, str | None]:
    """Check the path part (rules 1 and 2); return (directory, object name or None for .all)."""
    if not path.startswith("/"):
        raise InvalidView(f"object path {text!r} must be absolute (start with '/')")
    segments = path[1:].split("/")
    position = 1
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        _check_segment(text, segment, position, is_last=index == last)
        position += len(segment) + 1
    directory = "/" + "/".join(segments[:-1])
    return directory, None if segments[-1] == ALL_OBJECT else segments[-1]


def _check_segment(text: str, segment: str, position: int, *, is_last: bool) -> None:
    where = f"in object path {text!r} at position {position}"
    if not segment:
        raise InvalidView(
            f"empty segment {where}; name an object, or '.all' for every object in a directory"
        )
    if segment in (".", ".."):
        raise InvalidView(f"segment {segment!r} {where}; paths must be normalised")
    if segment.startswith(".") and segment != ALL_OBJECT:
        raise InvalidView(
            f"special object {segment!r} {where}; of PPS's special objects only '.all' "
            "can be subscribed to"
        )
    if segment == ALL_OBJECT and not is_last:
        raise InvalidView(f"'.all' {where} must be the last segment")
    control = _CONTROL.search(segment)
    if control:
        raise InvalidView(
            f"control character U+{ord(control.group()):04X} in object path {text!r} at "
            f"position {position + control.start()}"
        )
    try:
        size = len(segment.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidView(f"segment {where} is not well-formed UTF-8 (lone surrogate)") from error
    if size > MAX_NAME_BYTES:
        raise InvalidView(f"segment {where} is {size} bytes; PPS allows {MAX_NAME_BYTES}")


def _read_option(
    text: str, option: str, position: int, flags: set[str], values: dict[str, str]
) -> str:
    """Record one open option (rule 3) in ``flags`` or ``values``; return its key."""
    key, equals, value = option.partition("=")
    where = f"in object path {text!r} at position {position}"
    if not option:
        raise InvalidView(f"empty open option {where}")
    if key in flags or key in values:
        raise InvalidView(f"open option {key!r} given twice {where}")
    if key in FLAG_OPTIONS:
        if equals:
            raise InvalidView(f"open option {key!r} takes no value {where}")
        flags.add(key)
    elif key in VALUE_OPTIONS:
        if not value:
            raise InvalidView(f"open option {key!r} needs a value ({key}=...) {where}")
        values[key] = value
    elif key in REFUSED_OPTIONS:
        raise InvalidView(f"unsupported open option {key!r} {where}: {REFUSED_OPTIONS[key]}")
    elif key in SERVER_OPTIONS:
        raise InvalidView(
            f"unsupported open option {key!r} {where}: it configures the PPS server, "
            "not a subscription"
        )
    else:
        known = ", ".join((*FLAG_OPTIONS, "f=", "backlog=", "notify="))
        raise InvalidView(f"unknown open option {option!r} {where}; known options: {known}")
    return key


def _check_notify(text: str, notify: str) -> None:
    group, colon, value = notify.partition(":")
    if not (group and colon and value):
        raise InvalidView(f"object path {text!r}: notify={notify!r} must have the form id:value")


def _backlog(text: str, kb: str | None) -> int | None:
    """``backlog=KB`` in bytes; 0 (as in PPS) or absent for the default."""
    if kb is None:
        return None
    if not kb.isdigit() or int(kb) > MAX_BACKLOG_KB:
        raise InvalidView(
            f"object path {text!r}: backlog={kb!r} must be a number of KB from 0 to"
            f" {MAX_BACKLOG_KB}"
        )
    return int(kb) * 1024 or None


def _parse_specs(
    text: str, specs: str | None, position: int
) -> tuple[frozenset[str] | None, tuple[AttributeFilter, ...]]:
    """Parse ``f=`` specs (rule 4) into selected names (None when there are none) and filters."""
    if specs is None:
        return None, ()
    names: set[str] = set()
    filters: list[AttributeFilter] = []
    for raw, offset in _split_specs(text, specs, position):
        spec = _SPEC.fullmatch(raw)
        if spec is None:
            raise InvalidView(_spec_problem(text, raw, offset))
        minus, name, op, value = spec.groups()
        if op is None:
            names.add(name)
            continue
        if minus:
            raise InvalidView(
                f"'-' marks deletions of a bare attribute name, not a comparison: {raw!r} in "
                f"object path {text!r} at position {offset}"
            )
        filters.append(_comparison(text, name, op, _unescape(value), offset))
    return (frozenset(names) if names else None), tuple(filters)


def _split_specs(text: str, specs: str, start: int) -> list[tuple[str, int]]:
    """Split ``f=`` text on unescaped ``+``, keeping escapes; each part with its position."""
    parts: list[tuple[str, int]] = []
    begin = 0
    index = 0
    while index < len(specs):
        char = specs[index]
        if char == "\\":
            if specs[index + 1 : index + 2] not in ("+", "\\"):
                raise InvalidView(
                    f"'\\' in object path {text!r} at position {start + index} must escape "
                    "'+' or '\\'"
                )
            index += 2
            continue
        if char == "+":
            parts.append((specs[begin:index], start + begin))
            begin = index + 1
        index += 1
    parts.append((specs[begin:], start + begin))
    for raw, offset in parts:
        if not raw:
            raise InvalidView(f"empty attribute spec in object path {text!r} at position {offset}")
    return parts


def _spec_problem(text: str, raw: str, offset: int) -> str:
    return (
        f"invalid attribute spec {raw!r} in object path {text!r} at position {offset}: "
        "attribute names are letters, digits, '_' and '.', starting with a letter or '_', "
        "optionally followed by <, <=, >, >=, =, == or != and a value"
    )


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)


def _comparison(text: str, name: str, op: str, value: str, offset: int) -> AttributeFilter:
    """Build one value filter, typing its value as PPS does (rule 4)."""
    op = "=" if op == "==" else op
    number = as_long_long(value)
    if number is not None:
        return AttributeFilter(name, op, number)
    if op not in ("=", "!="):
        raise InvalidView(
            f"operator {op!r} needs an integer value, got {value!r} in object path {text!r} "
            f"at position {offset}; strings compare with =, == and != only"
        )
    return AttributeFilter(name, op, value)


def as_long_long(text: str) -> int | None:
    """The integer ``text`` spells, when it is one in the range of a C long long, else None."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if LONG_LONG_MIN <= number <= LONG_LONG_MAX else None
