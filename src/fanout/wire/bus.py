"""The subject bus's format: subjects and messages between the database connector (the
publisher) and snoopy object caches (``fanout.cache``), after Liebig et al., §4.1 and
Appendix A. The reference is docs/caches.md, "The subject namespace". Rules:

1. **Object subjects** are ``<KIND>.<type>.<key>.<domain>.<label...>`` (``OBJECT_KINDS``; ``-``
   for no label): every message about an object travels under its subject.
2. **Request subjects** carry no label: ``LOAD.<type>.<key>.<domain>`` (answered under the
   object's subject, to every cache), ``QUERY.<type>.<domain>``, ``TYPES.<domain>``.
3. **Tokens** hold no ``.``, ``*``, ``>`` or white space: other bytes are ``%XX``, the empty
   string ``%``, a lone ``-`` ``%2D``; ``token`` and ``untoken`` are exact inverses.
4. **Label patterns** take NATS's wildcards ``*`` and, last, ``>``; anything else there is
   ``InvalidLabel``.
5. **Messages** are msgpack arrays; an object's state is its row's msgpack, cut into fragments of
   at most ``fragment_bytes`` sharing request id and version (the source's ``_version``).
"""

from __future__ import annotations

import re
from typing import Final, Literal

import msgspec

from fanout.errors import FanoutError

ObjectKind = Literal["LOADREPLY", "UPDATENOTIFY", "CREATE", "DELETE"]
OBJECT_KINDS: Final = ("LOADREPLY", "UPDATENOTIFY", "CREATE", "DELETE")
LOAD: Final = "LOAD"
QUERY: Final = "QUERY"
TYPES: Final = "TYPES"
#: The label token of an object without a label.
NO_LABEL: Final = "-"
#: Default largest fragment of an object's state, in bytes (NATS's default payload limit is
#: 1 MiB; the rest of a message is small).
FRAGMENT_BYTES: Final = 512 * 1024

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPED = re.compile(r"(?:[A-Za-z0-9_-]|%[0-9A-F]{2})+|%")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class InvalidLabel(FanoutError):
    """A label pattern that is not one (rule 4)."""

    code = "invalid_label"


class InvalidSubject(FanoutError):
    """A subject or token that does not follow rules 1-3 (a malformed bus message)."""

    code = "invalid_subject"


# -- tokens (rule 3) -----------------------------------------------------------------------------


def token(text: str) -> str:
    """``text`` as one subject token (rule 3)."""
    if not text:
        return "%"
    if _PLAIN.fullmatch(text):
        return text
    return "".join(
        chr(byte) if _PLAIN.fullmatch(chr(byte)) else f"%{byte:02X}"
        for byte in text.encode("utf-8")
    )


def untoken(spelled: str) -> str:
    """The text a token spells (the inverse of ``token``).

    Raises:
        InvalidSubject: ``spelled`` is no token ``token`` makes.
    """
    if spelled == "%":
        return ""
    if not _ESCAPED.fullmatch(spelled):
        raise InvalidSubject(f"{spelled!r} is not a subject token")
    if "%" not in spelled:
        return spelled
    raw = bytearray()
    at = 0
    while at < len(spelled):
        if spelled[at] == "%":
            raw.append(int(spelled[at + 1 : at + 3], 16))
            at += 3
        else:
            raw.append(ord(spelled[at]))
            at += 1
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSubject(f"{spelled!r} does not spell UTF-8 text") from None
    if token(text) != spelled:
        raise InvalidSubject(f"{spelled!r} is not how {text!r} is spelled (rule 3)")
    return text


def key_token(key: int | str) -> str:
    """An object's key as a token: an integer in decimal, a string by ``token``."""
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"a key is an integer or a string, not {type(key).__name__}")
    return str(key) if isinstance(key, int) else token(key)


def key_from_token(spelled: str, integer: bool) -> int | str:
    """The key a token spells, for a type whose keys are integers or strings.

    Raises:
        InvalidSubject: not a key of that kind.
    """
    if not integer:
        return untoken(spelled)
    if not re.fullmatch(r"-?[0-9]+", spelled):
        raise InvalidSubject(f"{spelled!r} is not an integer key")
    return int(spelled)


def label_tokens(label: str | None) -> tuple[str, ...]:
    """An object's label as subject tokens: ``("-",)`` for none, else one per segment."""
    if label is None:
        return (NO_LABEL,)
    return tuple("%2D" if part == NO_LABEL else token(part) for part in label.split("."))


def label_from_tokens(tokens: tuple[str, ...]) -> str | None:
    """The label ``label_tokens`` spelled as ``tokens``.

    Raises:
        InvalidSubject: they spell no label.
    """
    if tokens == (NO_LABEL,):
        return None
    if not tokens or NO_LABEL in tokens:
        raise InvalidSubject(f"{'.'.join(tokens)!r} is not a label")
    return ".".join(NO_LABEL if part == "%2D" else untoken(part) for part in tokens)


# -- label patterns (rule 4) ---------------------------------------------------------------------


def pattern_tokens(pattern: str) -> tuple[str, ...]:
    """A label pattern as subject tokens, wildcards kept.

    Raises:
        InvalidLabel: not a pattern (rule 4); the message says which segment and why.
    """
    if not isinstance(pattern, str):
        raise InvalidLabel(f"a label pattern is a string, not {type(pattern).__name__}")
    parts = pattern.split(".")
    tokens: list[str] = []
    for at, part in enumerate(parts):
        if part == "":
            raise InvalidLabel(f"label pattern {pattern!r}: segment {at + 1} is empty")
        if part == ">" and at != len(parts) - 1:
            raise InvalidLabel(f"label pattern {pattern!r}: '>' may only be the last segment")
        if part in ("*", ">"):
            tokens.append(part)
        elif "*" in part or ">" in part:
            raise InvalidLabel(
                f"label pattern {pattern!r}: segment {part!r} mixes a wildcard with other"
                " characters ('*' and '>' stand alone)"
            )
        else:
            tokens.append("%2D" if part == NO_LABEL else token(part))
    return tuple(tokens)


def tokens_match(pattern: tuple[str, ...], tokens: tuple[str, ...]) -> bool:
    """Whether subject ``tokens`` match ``pattern`` under NATS's rules (``*``: one token;
    ``>`` last: one or more)."""
    for at, want in enumerate(pattern):
        if want == ">":
            return len(tokens) > at
        if at >= len(tokens) or (want != "*" and want != tokens[at]):
            return False
    return len(tokens) == len(pattern)


# -- subjects (rules 1, 2) -----------------------------------------------------------------------


def check_name(name: str, what: str) -> str:
    """A type or domain name: lower-case letters, digits and ``_`` (a single token).

    Raises:
        InvalidSubject: it is not one.
    """
    if not _NAME.fullmatch(name):
        raise InvalidSubject(
            f"{what} {name!r} is not a name: lower-case letters, digits and '_', starting with"
            " a letter"
        )
    return name


def object_subject(
    kind: ObjectKind, type_name: str, key: int | str, domain: str, label: str | None
) -> str:
    """The subject a message about an object travels under (rule 1)."""
    return ".".join((kind, type_name, key_token(key), domain, *label_tokens(label)))


def object_filter(kind: str, type_name: str, key: int | str, domain: str) -> str:
    """What a cache listens to for one object: ``kind`` may be ``*`` (every kind)."""
    return f"{kind}.{type_name}.{key_token(key)}.{domain}.>"


def label_filter(kind: str, type_name: str, domain: str, pattern: str) -> str:
    """What a cache listens to for a label pattern's objects.

    Raises:
        InvalidLabel: ``pattern`` is not one.
    """
    return ".".join((kind, type_name, "*", domain, *pattern_tokens(pattern)))


def load_subject(type_name: str, key: int | str, domain: str) -> str:
    """Where a cache asks for one object (rule 2)."""
    return f"{LOAD}.{type_name}.{key_token(key)}.{domain}"


def query_subject(type_name: str, domain: str) -> str:
    """Where a cache asks for a label pattern's objects (rule 2)."""
    return f"{QUERY}.{type_name}.{domain}"


def types_subject(domain: str) -> str:
    """Where a cache asks which types the connector serves (rule 2)."""
    return f"{TYPES}.{domain}"


class ObjectSubject(msgspec.Struct, frozen=True):
    """An object subject, read (rule 1)."""

    kind: ObjectKind
    type_name: str
    key_token: str
    domain: str
    label_tokens: tuple[str, ...]


def parse_object_subject(subject: str) -> ObjectSubject:
    """Read an object subject.

    Raises:
        InvalidSubject: not one (too few tokens, an unknown kind).
    """
    parts = subject.split(".")
    if len(parts) < 5 or parts[0] not in OBJECT_KINDS:
        raise InvalidSubject(f"{subject!r} is not an object subject (rule 1)")
    kind: ObjectKind = parts[0]  # type: ignore[assignment]  # checked just above
    return ObjectSubject(kind, parts[1], parts[2], parts[3], tuple(parts[4:]))


# -- messages (rule 5) ---------------------------------------------------------------------------


class ObjectMessage(msgspec.Struct, array_like=True, frozen=True):
    """One fragment of a message about an object.

    Attributes:
        request: the request id: a ``LOAD``'s or ``QUERY``'s, or the connector's for the
            micro-batch (``b<epoch>.<seq>``).
        version: the object's version (its source's commit order); for a ``LOADREPLY`` of a
            missing object, 0.
        found: False for a ``DELETE`` and for a ``LOADREPLY`` of a missing object (no state).
        part: this fragment's place, from 0.
        parts: how many fragments the state has (1 without state).
        data: this fragment of the msgpack of the row (empty without state).
        sent: the connector's wall clock when it published it (seconds since the epoch).
    """

    request: str
    version: int
    found: bool
    part: int
    parts: int
    data: bytes
    sent: float


class LoadRequest(msgspec.Struct, array_like=True, frozen=True):
    """A ``LOAD``: the id its ``LOADREPLY`` will carry."""

    request: str


class QueryRequest(msgspec.Struct, array_like=True, frozen=True):
    """A ``QUERY``: the id its ``LOADREPLY`` messages will carry, and the label pattern."""

    request: str
    pattern: str


class QueryReply(msgspec.Struct, array_like=True, frozen=True):
    """The answer to a ``QUERY`` (to the requester): how many objects were published for it,
    or why it was refused."""

    request: str
    count: int
    error: str = ""


class TypeInfo(msgspec.Struct, frozen=True):
    """One type the connector serves.

    Attributes:
        key: the key column.
        integer_key: whether keys are integers (else strings).
        label: the column holding the label (None: objects have none).
        columns: column -> declared type (``long``, ``string``, ...).
        table: the PostgreSQL table behind it (None: not stored in PostgreSQL).
    """

    key: str
    integer_key: bool
    label: str | None
    columns: dict[str, str]
    table: str | None = None


class TypesReply(msgspec.Struct, frozen=True):
    """The answer to ``TYPES``: type name -> what it is."""

    types: dict[str, TypeInfo]


Row = dict[str, object]

_ROW_ENCODER = msgspec.msgpack.Encoder()
_ROW_DECODER = msgspec.msgpack.Decoder(dict[str, object])


def encode_row(row: Row) -> bytes:
    """An object's state as msgpack."""
    return _ROW_ENCODER.encode(row)


def decode_row(data: bytes) -> Row:
    """The row ``encode_row`` made.

    Raises:
        msgspec.DecodeError: ``data`` is not one.
    """
    return _ROW_DECODER.decode(data)


def fragments(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into pieces of at most ``size`` bytes (one empty piece for no data)."""
    if size < 1:
        raise ValueError(f"a fragment holds at least one byte, not {size}")
    return [data[at : at + size] for at in range(0, len(data), size)] or [b""]
