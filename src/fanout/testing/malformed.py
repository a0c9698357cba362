"""The malformed frames ``testing.vectors`` writes as test vectors, each with what its receiver
must answer (docs/protocol.md, "Errors"; ``spec/README.md``, "Malformed vectors"), and the
frames of a newer peer an older one must still decode (unknown fields ignored, defaults filled
in: docs/protocol.md, "Versioning and capabilities")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fanout.wire.messages import PROTOCOL_VERSION


@dataclass(frozen=True)
class Compatible:
    """Bytes a receiver decodes although they are not what fanout's encoder writes."""

    direction: str
    name: str
    description: str
    data: bytes


@dataclass(frozen=True)
class Malformed:
    """Bytes the receiver must refuse, and how (``expect``; see ``spec/README.md``)."""

    direction: str
    name: str
    description: str
    data: bytes
    after_hello: bool
    expect: dict[str, Any]
    context: dict[str, Any] = field(default_factory=dict)


def _raw(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


def _subscribe_raw(view: object, sub: object = 7) -> bytes:
    return _raw({"type": "subscribe", "sub": sub, "dataset": "agents", "view": view})


def _protocol(ref: int | None = None) -> dict[str, Any]:
    return {"error": {"code": "protocol", "ref": ref}, "close": None}


HANDSHAKE: dict[str, Any] = {"error": {"code": "handshake", "ref": None}, "close": 1008}
REFUSE: dict[str, Any] = {"refuse": "protocol"}


def _push_raw(**columns: Any) -> bytes:
    empty = {"length": 0, "columns": []}
    fields = {"entered": empty, "updated": empty, "left": empty, **columns}
    head = {
        "type": "push",
        "sub": 1,
        "epoch": 1,
        "seq": 1,
        "tick": 1,
        "tick_time": 0.0,
        "full": False,
    }
    return _raw({**head, **fields})


MALFORMED: list[Malformed] = [
    Malformed(
        "to_relay",
        "newer_version",
        "a hello of protocol version 2: refused, closed",
        _raw({"type": "hello", "version": PROTOCOL_VERSION + 1, "role": "subscriber"}),
        False,
        HANDSHAKE,
    ),
    Malformed(
        "to_relay",
        "subscribe_first",
        "a subscribe before the hello: refused, closed",
        _subscribe_raw({"kind": "box", "lo": [0, 0], "hi": [1, 1]}),
        False,
        HANDSHAKE,
    ),
    Malformed(
        "to_relay",
        "unknown_role",
        "a hello with a role the relay does not serve",
        _raw({"type": "hello", "version": PROTOCOL_VERSION, "role": "admin"}),
        False,
        HANDSHAKE,
    ),
    Malformed(
        "to_relay", "not_msgpack", "0xc1 is never used in msgpack", b"\xc1", True, _protocol()
    ),
    Malformed(
        "to_relay", "not_a_map", "a msgpack array, not a map", _raw([1, 2, 3]), True, _protocol()
    ),
    Malformed("to_relay", "no_type", "a map without a type", _raw({"sub": 4}), True, _protocol(4)),
    Malformed(
        "to_relay",
        "unknown_type",
        "a type no frame has",
        _raw({"type": "subscrib", "sub": 5}),
        True,
        _protocol(5),
    ),
    Malformed(
        "to_relay",
        "frame_of_another_direction",
        "a push sent to a relay",
        _push_raw(),
        True,
        _protocol(1),
    ),
    Malformed(
        "to_relay",
        "second_hello",
        "a hello after the handshake",
        _raw({"type": "hello", "version": PROTOCOL_VERSION, "role": "subscriber"}),
        True,
        _protocol(),
    ),
    Malformed(
        "to_relay",
        "sub_not_integer",
        "sub is a string",
        _subscribe_raw({"kind": "box", "lo": [0, 0], "hi": [1, 1]}, sub="7"),
        True,
        _protocol(),
    ),
    Malformed(
        "to_relay",
        "missing_field",
        "a subscribe without its view",
        _raw({"type": "subscribe", "sub": 8, "dataset": "agents"}),
        True,
        _protocol(8),
    ),
    Malformed(
        "to_relay",
        "box_lo_above_hi",
        "a box with lo > hi",
        _subscribe_raw({"kind": "box", "lo": [5, 0], "hi": [1, 1]}),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "box_not_finite",
        "a box corner that is NaN",
        _subscribe_raw({"kind": "box", "lo": [math.nan, 0], "hi": [1, 1]}),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "unknown_view_kind",
        "a view kind no view has",
        _subscribe_raw({"kind": "polygon", "points": []}),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "sector_half_angle",
        "a sector's half angle above pi",
        _subscribe_raw(
            {"kind": "sector", "center": [0, 0], "radius": 1, "heading": 0, "half_angle": 4}
        ),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "union_mixed_dims",
        "a union of a 2-D and a 3-D box",
        _subscribe_raw(
            {
                "kind": "union",
                "members": [
                    {"kind": "box", "lo": [0, 0], "hi": [1, 1]},
                    {"kind": "box", "lo": [0, 0, 0], "hi": [1, 1, 1]},
                ],
            }
        ),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "sql_not_parsing",
        "SQL that does not parse",
        _subscribe_raw({"kind": "sql", "text": "SELEKT * FROM flights"}),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "topic_bad_filter",
        "'#' not last in a topic filter",
        _subscribe_raw({"kind": "topic", "filter": "a/#/b"}),
        True,
        _protocol(7),
    ),
    Malformed(
        "to_relay",
        "not_utf8",
        "a string that is not UTF-8",
        b"\x81\xa4type\xa2\xff\xfe",
        True,
        _protocol(),
    ),
    Malformed(
        "to_relay",
        "column_data_type",
        "a column whose data is a number",
        _raw(
            {
                "type": "publish",
                "req": 3,
                "dataset": "flights",
                "upserts": {"length": 1, "columns": [["id", "<i8", 5]]},
            }
        ),
        True,
        _protocol(3),
    ),
    Malformed(
        "to_subscriber",
        "newer_welcome",
        "a welcome of protocol version 2",
        _raw({"type": "welcome", "version": PROTOCOL_VERSION + 1, "server": "s", "session": "x"}),
        False,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "unknown_type",
        "a type no frame has",
        _raw({"type": "shove", "sub": 1}),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "numeric_length",
        "3 bytes of <i8 data for 1 row",
        _push_raw(entered={"length": 1, "columns": [["id", "<i8", b"\x01\x00\x00"]]}),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "unknown_dtype",
        "a dtype the protocol does not have",
        _push_raw(entered={"length": 1, "columns": [["id", "<c16", bytes(16)]]}),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "bitmap_length",
        "a validity bitmap of 2 bytes for 3 rows",
        _push_raw(
            entered={
                "length": 3,
                "columns": [["id", "<i8", bytes(24)], ["id", "valid", b"\x07\x00"]],
            }
        ),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "bitmap_alone",
        "a validity bitmap after a column of another name",
        _push_raw(
            entered={"length": 1, "columns": [["id", "<i8", bytes(8)], ["x", "valid", b"\x01"]]}
        ),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "bitmap_on_strings",
        "a validity bitmap after a str column",
        _push_raw(entered={"length": 1, "columns": [["s", "str", ["a"]], ["s", "valid", b"\x01"]]}),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "bytes_offsets",
        "bytes offsets past the data",
        _push_raw(
            entered={
                "length": 1,
                "columns": [["b", "bytes", b"\x00\x00\x00\x00\x09\x00\x00\x00ab"]],
            }
        ),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "strings_length",
        "2 strings for 3 rows",
        _push_raw(entered={"length": 3, "columns": [["s", "str", ["a", "b"]]]}),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "left_without_key",
        "left rows without the key column",
        _push_raw(left={"length": 1, "columns": [["x", "<f8", bytes(8)]]}),
        True,
        REFUSE,
        {"key": "id"},
    ),
    Malformed(
        "to_subscriber",
        "null_key",
        "a left key that is NULL",
        _push_raw(
            left={"length": 1, "columns": [["id", "<i8", bytes(8)], ["id", "valid", b"\x00"]]}
        ),
        True,
        REFUSE,
        {"key": "id"},
    ),
    Malformed(
        "to_subscriber",
        "duplicate_column",
        "a column twice",
        _push_raw(
            entered={"length": 1, "columns": [["id", "<i8", bytes(8)], ["id", "<i8", bytes(8)]]}
        ),
        True,
        REFUSE,
    ),
    Malformed(
        "to_subscriber",
        "bad_decimal",
        "decimal text that is no number",
        _push_raw(entered={"length": 1, "columns": [["d", "decimal", ["12,5"]]]}),
        True,
        REFUSE,
    ),
]


_BOX = {"kind": "box", "lo": [0, 0], "hi": [1, 1]}
COMPATIBLE: list[Compatible] = [
    Compatible(
        "to_relay",
        "hello_newer_fields",
        "a hello with fields a newer client adds: ignored",
        _raw({"type": "hello", "version": PROTOCOL_VERSION, "role": "subscriber", "zstd": True}),
    ),
    Compatible(
        "to_relay",
        "subscribe_defaults",
        "a subscribe of its required fields only: every default filled in",
        _subscribe_raw(_BOX, sub=1),
    ),
    Compatible(
        "to_relay",
        "subscribe_every_field",
        "a subscribe naming every default, integers where floats go, fields in another order",
        _raw(
            {
                "stay": False,
                "view": {"hi": [1, 1], "lo": [0, 0], "kind": "box"},
                "type": "subscribe",
                "sub": 2,
                "dataset": "agents",
                "rate": 10,
                "priority": 0,
                "transform": None,
                "mode": "latest",
                "resume": None,
                "relevance": None,
            }
        ),
    ),
    Compatible(
        "to_relay",
        "view_newer_fields",
        "a view with a field a newer client adds: ignored",
        _subscribe_raw({**_BOX, "crs": "EPSG:4326"}, sub=3),
    ),
    Compatible(
        "to_subscriber",
        "welcome_of_an_older_relay",
        "a welcome without datasets (relays older than the field), with a newer field",
        _raw(
            {
                "type": "welcome",
                "version": PROTOCOL_VERSION,
                "server": "r",
                "session": "s",
                "region": "eu",
            }
        ),
    ),
    Compatible(
        "to_subscriber",
        "welcome_newer_kind",
        "a dataset kind newer than the client: a plain string",
        _raw(
            {
                "type": "welcome",
                "version": PROTOCOL_VERSION,
                "server": "r",
                "session": "s",
                "datasets": {"graph": "graph"},
            }
        ),
    ),
    Compatible(
        "to_subscriber",
        "error_newer_code",
        "an error code newer than the client, without ref",
        _raw({"type": "error", "code": "quota", "message": "over quota"}),
    ),
    Compatible(
        "to_subscriber",
        "push_float32",
        "a push with float32 coordinates (Transform precision float32)",
        _push_raw(
            entered={
                "length": 1,
                "columns": [["id", "<i8", bytes(8)], ["x", "<f4", b"\x00\x00\xc0\x3f"]],
            }
        ),
    ),
]
