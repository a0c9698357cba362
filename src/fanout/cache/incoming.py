"""A bus message about an object, read and checked, without I/O (``wire.bus`` rules 1, 3, 5):
what ``cache.client`` hands the core. Anything that does not fit raises; the shell counts it as
malformed and drops it (``docs/caches.md``, bad input)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from fanout.cache.core import Reassembly, Ref
from fanout.wire.bus import (
    InvalidSubject,
    ObjectKind,
    ObjectMessage,
    Row,
    TypeInfo,
    decode_row,
    key_from_token,
    label_from_tokens,
    parse_object_subject,
)

#: What reading a malformed message raises.
MALFORMED = (InvalidSubject, msgspec.DecodeError, msgspec.ValidationError, ValueError)


@dataclass(frozen=True)
class Incoming:
    """One whole object message (its fragments put together).

    Attributes:
        kind: ``LOADREPLY``, ``UPDATENOTIFY``, ``CREATE`` or ``DELETE``.
        ref: (type, key).
        request: its request id.
        version: the object's version.
        row: its state (None: the object does not exist).
        label: its label, from its state (from its subject when it has none: a deletion).
        sent: when the connector published it.
    """

    kind: ObjectKind
    ref: Ref
    request: str
    version: int
    row: Row | None
    label: str | None
    sent: float


def read(
    subject: str,
    data: bytes,
    domain: str,
    types: Mapping[str, TypeInfo],
    reassembly: Reassembly,
) -> Incoming | None:
    """Read one message taken from the bus under ``subject``.

    Returns:
        The whole message, or None while fragments of it are still to come.

    Raises:
        InvalidSubject: a subject outside the namespace, of another domain or an unknown type,
            or a key that is not the type's kind.
        msgspec.DecodeError, msgspec.ValidationError: not a message, or a state that is not a
            row.
        ValueError: fragments that do not fit together, a message without state that has some,
            or a state whose key is not the subject's.
    """
    read_subject = parse_object_subject(subject)
    info = types.get(read_subject.type_name)
    if info is None or read_subject.domain != domain:
        raise InvalidSubject(f"{subject!r}: not a type of domain {domain!r}")
    key = key_from_token(read_subject.key_token, info.integer_key)
    message = msgspec.msgpack.decode(data, type=ObjectMessage)
    if not message.found and (message.parts != 1 or message.data):
        raise ValueError("a message without state has one empty part")
    whole = reassembly.add(subject, message)
    if whole is None:
        return None
    row = decode_row(whole) if message.found else None
    if row is not None and row.get(info.key) != key:
        raise ValueError(f"the state's key {row.get(info.key)!r} is not the subject's {key!r}")
    if row is None:
        label = label_from_tokens(read_subject.label_tokens)
    else:
        value = row.get(info.label) if info.label is not None else None
        label = None if value is None else str(value)
    ref: Ref = (read_subject.type_name, key)
    return Incoming(
        read_subject.kind, ref, message.request, message.version, row, label, message.sent
    )
