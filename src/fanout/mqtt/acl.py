"""The MQTT ACL file, in Mosquitto's format (``acl_file``), for password-file users and anonymous
clients (``--mqtt-acl-file``; docs/security.md, "MQTT"). Pure once read. Lines:

- ``topic [read|write|readwrite|deny] FILTER``: for the ``user`` named above it, or for
  anonymous clients before any ``user`` line (no access word: ``readwrite``);
- ``user NAME``: the ``topic`` lines after it are that user's;
- ``pattern [read|write|readwrite|deny] FILTER``: for every client, ``%u`` replaced by its user
  name and ``%c`` by its client id (a pattern is skipped for a client without a user name, or
  whose name or id holds ``+``, ``#`` or ``/``, which would widen it);
- blank lines and lines starting with ``#``: comments.

``deny`` takes away read and write from what the other lines give. A user the file does not name
gets its patterns only. Without an ACL file every authenticated client reads and writes every
topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fanout.errors import ConfigError, InvalidView
from fanout.mqtt.rights import Rights, check_filters

ACCESS = ("read", "write", "readwrite", "deny")
#: One ``topic`` or ``pattern`` line: (access, filter).
Line = tuple[str, str]


@dataclass(frozen=True)
class Acl:
    """An ACL file's lines, by whom they are for."""

    anonymous: tuple[Line, ...] = ()
    users: Mapping[str, tuple[Line, ...]] = field(default_factory=dict)
    patterns: tuple[Line, ...] = ()

    def rights(self, user: str | None, client_id: str) -> Rights:
        """The rights of a client logged in as ``user`` (None: anonymous) with ``client_id``."""
        lines = list(self.anonymous if user is None else self.users.get(user, ()))
        for access, pattern in self.patterns:
            text = _substituted(pattern, user, client_id)
            if text is not None:
                lines.append((access, text))
        read = tuple(f for a, f in lines if a in ("read", "readwrite"))
        write = tuple(f for a, f in lines if a in ("write", "readwrite"))
        deny = tuple(f for a, f in lines if a == "deny")
        return Rights(read, write, deny)


def _substituted(pattern: str, user: str | None, client_id: str) -> str | None:
    if "%u" in pattern and user is None:
        return None
    for value, marker in ((user or "", "%u"), (client_id, "%c")):
        if marker in pattern and any(c in value for c in "+#/"):
            return None
        pattern = pattern.replace(marker, value)
    return pattern


def parse_acl(text: str, where: str = "ACL") -> Acl:
    """An ACL file's text as an ``Acl``.

    Raises:
        ConfigError: a line that is none of the above, or a filter that is not valid (named by
            line number).
    """
    anonymous: list[Line] = []
    users: dict[str, list[Line]] = {}
    patterns: list[Line] = []
    current: list[Line] = anonymous
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        rest = rest.strip()
        if keyword == "user" and rest:
            current = users.setdefault(rest, [])
            continue
        if keyword not in ("topic", "pattern") or not rest:
            raise ConfigError(
                f"{where}, line {number}: expected 'user NAME', 'topic [ACCESS] FILTER' or"
                " 'pattern [ACCESS] FILTER'"
            )
        access, _, topic = rest.partition(" ")
        if access in ACCESS and topic.strip():
            topic = topic.strip()
        else:
            access, topic = "readwrite", rest
        try:
            check = topic.replace("%u", "u").replace("%c", "c") if keyword == "pattern" else topic
            check_filters((check,), f"{where}, line {number}")
        except InvalidView as exc:
            raise ConfigError(str(exc)) from None
        (patterns if keyword == "pattern" else current).append((access, topic))
    return Acl(
        tuple(anonymous), {user: tuple(lines) for user, lines in users.items()}, tuple(patterns)
    )


def read_acl(path: Path) -> Acl:
    """The ACL file at ``path``.

    Raises:
        ConfigError: it cannot be read, or see :func:`parse_acl`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"ACL file {path}: cannot read it: {exc}") from None
    return parse_acl(text, f"ACL file {path}")
