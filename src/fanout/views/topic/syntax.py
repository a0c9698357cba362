"""MQTT topic names and topic filters: the rules of the text, nothing about matching many (MQTT
3.1.1 4.7, 5.0 4.7-4.8; rule ids in brackets). Errors raise :class:`fanout.errors.InvalidView`
naming the rule, the level and the character position. Rules:

1. At least one character [MQTT-4.7.3-1], at most 65,535 bytes, no U+0000 [MQTT-4.7.3-2], no lone
   surrogates [MQTT-1.5.3-1].
2. ``/`` separates levels; empty levels are ordinary levels.
3. ``#`` is a whole level and the last, matching the parent and any children [MQTT-4.7.1-2];
   ``+`` a whole level matching one [MQTT-4.7.1-3].
4. Topic names have no wildcards [MQTT-3.3.2-2].
5. A filter starting with a wildcard does not match a topic starting with ``$`` [MQTT-4.7.2-1].
6. ``$share/{ShareName}/{filter}``: a share name of at least one character without ``/``, ``+``,
   ``#``, then a non-empty filter [MQTT-4.8.2-1, MQTT-4.8.2-2].
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from fanout.errors import InvalidView

MAX_TOPIC_BYTES = 65535
#: A regular expression (RE2 and Java alike) finding what no topic name contains: a wildcard or
#: U+0000 (``topic_levels``).
NOT_IN_NAMES = "[+#\\x00]"
SHARE_PREFIX = "$share/"


class FilterParts(NamedTuple):
    """A validated topic filter, split into what matching and delivery need."""

    share_group: str | None
    """The share name of a ``$share/group/filter`` subscription, None for an ordinary filter."""
    topic_filter: str
    """The filter without the ``$share/group/`` prefix."""
    levels: tuple[str, ...]
    """``topic_filter`` split on ``/``."""


def check_text(text: object, what: str) -> str:
    """Apply the UTF-8 string rules every topic name and filter share.

    Args:
        text: the candidate topic name or filter.
        what: "topic name" or "topic filter", for the error message.

    Returns:
        ``text``, known to be a non-empty str of at most 65,535 UTF-8 bytes without U+0000.

    Raises:
        InvalidView: not a str, empty, too long, containing U+0000 or a lone surrogate
            (MQTT 1.5.3, 4.7.3).
    """
    if not isinstance(text, str):
        raise InvalidView(f"{what} must be a string, got {type(text).__name__}")
    if not text:
        raise InvalidView(f"{what} is empty; MQTT needs at least one character (MQTT 4.7.3)")
    nul = text.find("\x00")
    if nul >= 0:
        raise InvalidView(f"{what} {text!r} contains U+0000 at position {nul} (MQTT 4.7.3)")
    if text.isascii() and len(text) <= MAX_TOPIC_BYTES:
        return text  # ASCII is one byte a character: nothing left to check
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidView(
            f"{what} {text[:40]!r} is not well-formed UTF-8: lone surrogate at position "
            f"{error.start} (MQTT 1.5.3)"
        ) from error
    if size > MAX_TOPIC_BYTES:
        raise InvalidView(
            f"{what} is {size} bytes of UTF-8; MQTT allows at most {MAX_TOPIC_BYTES} (MQTT 1.5.3)"
        )
    return text


def topic_levels(topic: object) -> list[str]:
    """Validate a topic name (the label a message is published under) and split it into levels.

    Args:
        topic: the candidate topic name.

    Returns:
        The levels of the topic, in order (at least one; empty levels kept).

    Raises:
        InvalidView: it breaks rule 1 or contains a wildcard (rule 4, [MQTT-3.3.2-2]).
    """
    text = check_text(topic, "topic name")
    for wildcard in "+#":
        position = text.find(wildcard)
        if position >= 0:
            level = text.count("/", 0, position)
            raise InvalidView(
                f"topic name {text!r} contains the wildcard {wildcard!r} at level {level} "
                f"(position {position}); wildcards belong in topic filters only (MQTT 3.3.2)"
            )
    return text.split("/")


def parse_filter(text: object) -> FilterParts:
    """Validate a topic filter, shared or not, and split it.

    Args:
        text: the candidate filter, e.g. ``sport/+/player1``, ``sport/#``, ``$share/g/sport/#``.

    Returns:
        The share group (or None), the underlying filter and its levels.

    Raises:
        InvalidView: the filter breaks rules 1, 3 or 6; the message names the rule, the level
            and the character position.
    """
    filter_text = check_text(text, "topic filter")
    if not filter_text.startswith(SHARE_PREFIX):
        return FilterParts(None, filter_text, _filter_levels(filter_text, filter_text, 0, 0))
    group, underlying = _split_share(filter_text)
    start = len(SHARE_PREFIX) + len(group) + 1
    return FilterParts(group, underlying, _filter_levels(filter_text, underlying, start, 2))


def _split_share(text: str) -> tuple[str, str]:
    """Split ``$share/group/filter`` into group and filter (MQTT 5.0 section 4.8.2)."""
    rest = text[len(SHARE_PREFIX) :]
    slash = rest.find("/")
    group = rest if slash < 0 else rest[:slash]
    if not group:
        raise InvalidView(
            f"shared subscription {text!r} has an empty share name at position "
            f"{len(SHARE_PREFIX)} [MQTT-4.8.2-1]"
        )
    for bad in "+#":
        if bad in group:
            position = len(SHARE_PREFIX) + group.index(bad)
            raise InvalidView(
                f"share name {group!r} in {text!r} contains {bad!r} at position {position}; "
                "share names must not contain '/', '+' or '#' [MQTT-4.8.2-2]"
            )
    if slash < 0 or slash == len(rest) - 1:
        raise InvalidView(
            f"shared subscription {text!r} has no topic filter after the share name "
            f"{group!r} [MQTT-4.8.2-2]"
        )
    return group, rest[slash + 1 :]


def _filter_levels(text: str, underlying: str, start: int, first_level: int) -> tuple[str, ...]:
    """Split ``underlying`` into levels, checking where wildcards stand (rule 3).

    ``start`` and ``first_level`` locate ``underlying`` inside ``text`` so that errors point into
    the text the caller gave.
    """
    levels = tuple(underlying.split("/"))
    position = start
    last = len(levels) - 1
    for index, level in enumerate(levels):
        where = f"level {first_level + index}"
        if "#" in level:
            at = position + level.index("#")
            if level != "#":
                raise _wildcard_error(text, "'#' must occupy a whole level", where, at, "2")
            if index != last:
                raise _wildcard_error(text, "'#' must be the last level", where, at, "2")
        if "+" in level and level != "+":
            at = position + level.index("+")
            raise _wildcard_error(text, "'+' must occupy a whole level", where, at, "3")
        position += len(level) + 1
    return levels


def _wildcard_error(text: str, problem: str, where: str, position: int, rule: str) -> InvalidView:
    return InvalidView(
        f"invalid topic filter {text!r}: {problem} ({where}, position {position}) "
        f"[MQTT-4.7.1-{rule}]"
    )


@lru_cache(maxsize=4096)
def filter_regex(levels: tuple[str, ...]) -> re.Pattern[str]:
    """Compile a validated filter's levels into a regex whose ``fullmatch`` is MQTT matching.

    Args:
        levels: the levels of a filter that :func:`parse_filter` accepted (no ``$share`` prefix).

    Returns:
        A compiled pattern; ``pattern.fullmatch(topic)`` is truthy iff the filter matches the
        (valid) topic name.
    """
    parts: list[str] = []
    for level in levels:
        if level == "#":
            # '#' also matches the parent level: 'sport/#' matches 'sport' (MQTT 4.7.1.2).
            body = "/".join(parts) + "(?:/.*)?" if parts else ".*"
            break
        parts.append("[^/]*" if level == "+" else re.escape(level))
    else:
        body = "/".join(parts)
    if levels[0] in ("+", "#"):
        body = r"(?!\$)" + body  # rule 5 [MQTT-4.7.2-1]
    return re.compile(body, re.DOTALL)


def arrow_regex(levels: tuple[str, ...]) -> str:
    """``filter_regex`` in RE2 syntax (Arrow's ``match_substring_regex``), anchored, except rule 5.

    RE2 has no lookahead, so the pattern does not exclude topics starting with ``$`` when the
    filter starts with a wildcard: the caller does (``TopicFilter.match_arrow``). Literal
    characters other than ASCII letters and digits are written as ``\\x{hex}``, so no level can
    be read as regex syntax.
    """
    parts: list[str] = []
    for level in levels:
        if level == "#":
            body = "/".join(parts) + "(?:/.*)?" if parts else ".*"
            break
        parts.append("[^/]*" if level == "+" else _re2_literal(level))
    else:
        body = "/".join(parts)
    return f"(?s)^{body}$"


def _re2_literal(level: str) -> str:
    return "".join(
        char if char.isascii() and char.isalnum() else f"\\x{{{ord(char):x}}}" for char in level
    )
