"""The protocol's test vectors and JSON Schema, made from the real encoder (``spec/``).

Every client, in any language, is tested against ``spec/vectors/*.json``: frames as bytes, their
meaning as JSON, and for malformed frames what the receiver must answer (``spec/README.md`` says
the format). ``python -m fanout.testing.vectors [DIR]`` writes them and ``spec/schema.json`` (the
JSON Schema of the decoded msgpack) from the cases in ``testing.vectorcases`` and
``testing.malformed``; a test checks that doing so again changes no byte, so the files cannot
drift from the code.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import sys
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fanout.testing.malformed import COMPATIBLE, MALFORMED, Compatible, Malformed
from fanout.testing.vectorcases import VALID, Valid
from fanout.wire import codec
from fanout.wire.columns import Columns, decode_columns, to_python
from fanout.wire.messages import FromPublisher, ToPublisher, ToRelay, ToSubscriber

#: The decoded union of each direction, by the name vectors give it.
DIRECTIONS: dict[str, Any] = {
    "to_relay": ToRelay,
    "to_subscriber": ToSubscriber,
    "to_publisher": ToPublisher,
    "from_publisher": FromPublisher,
}
#: The name of each direction's union in the schema's ``$defs``.
UNIONS = {
    "ToRelay": "to_relay",
    "ToSubscriber": "to_subscriber",
    "ToPublisher": "to_publisher",
    "FromPublisher": "from_publisher",
}
SPEC = Path(__file__).resolve().parents[3] / "spec"
_BINARY = {"type": "string", "contentEncoding": "base64"}


def plain(value: Any) -> Any:
    """A decoded msgpack value as JSON: bin as ``{"$bin": hex}``, a float JSON cannot hold as
    ``{"$float": "NaN" | "Infinity" | "-Infinity"}``, everything else as itself."""
    if isinstance(value, bytes):
        return {"$bin": value.hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return {
            "$float": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        }
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def whole(value: Any) -> Any:
    """A decoded frame as JSON with every field, defaults filled in (what a typed decoder
    holds): structs as maps (their tag first) or, if array-like, arrays; bytes and floats as
    :func:`plain` says."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        fields = [whole(getattr(value, f.name)) for f in msgspec.structs.fields(value)]
        if config.array_like:
            return fields
        names = [f.encode_name for f in msgspec.structs.fields(value)]
        tag = {config.tag_field: config.tag} if config.tag_field else {}
        return tag | dict(zip(names, fields, strict=True))
    if isinstance(value, tuple | list):
        return [whole(item) for item in value]
    if isinstance(value, dict):
        return {key: whole(item) for key, item in value.items()}
    return plain(value)


def cell(value: Any) -> Any:
    """One decoded column value as JSON: timestamps as RFC 3339 text in UTC (``Z``), dates as
    ``YYYY-MM-DD``, decimals as their text, bytes and floats as :func:`plain` says."""
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return plain(value)


def rows_of(frame: object) -> dict[str, dict[str, list[Any]]]:
    """Each ``Columns`` field of a frame, decoded: field -> column -> values (None: NULL)."""
    out: dict[str, dict[str, list[Any]]] = {}
    for field in msgspec.structs.fields(frame):  # type: ignore[arg-type]
        payload = getattr(frame, field.name)
        if isinstance(payload, Columns):
            arrays = decode_columns(payload)
            out[field.name] = {name: _values(array) for name, array in arrays.items()}
    return out


def _values(array: np.ndarray[Any, Any]) -> list[Any]:
    if not isinstance(array, np.ma.MaskedArray):
        return [cell(value) for value in to_python(array)]
    values = to_python(np.ma.getdata(array))
    nulls = np.ma.getmaskarray(array).tolist()
    return [None if null else cell(value) for value, null in zip(values, nulls, strict=True)]


def valid_vector(case: Valid) -> dict[str, Any]:
    data = codec.encode(case.frame)
    vector: dict[str, Any] = {
        "name": case.name,
        "description": case.description,
        "hex": data.hex(),
        "decoded": plain(msgspec.msgpack.decode(data)),
    }
    if rows := rows_of(case.frame):
        vector["rows"] = rows
    return vector


def compatible_vector(case: Compatible) -> dict[str, Any]:
    frame: object = codec.Decoder(DIRECTIONS[case.direction]).decode(case.data)
    return {
        "name": case.name,
        "description": case.description,
        "hex": case.data.hex(),
        "frame": whole(frame),
    }


def malformed_vector(case: Malformed) -> dict[str, Any]:
    vector: dict[str, Any] = {
        "name": case.name,
        "description": case.description,
        "hex": case.data.hex(),
        "after_hello": case.after_hello,
        "expect": case.expect,
    }
    if case.context:
        vector["context"] = case.context
    return vector


def vector_files() -> dict[str, dict[str, Any]]:
    """Every vector file's content, by file name."""
    files: dict[str, dict[str, Any]] = {}
    for direction in DIRECTIONS:
        files[f"{direction}.json"] = {
            "direction": direction,
            "valid": True,
            "vectors": [valid_vector(c) for c in VALID if c.direction == direction],
        }
        compatible = [compatible_vector(c) for c in COMPATIBLE if c.direction == direction]
        if compatible:
            files[f"compatible_{direction}.json"] = {
                "direction": direction,
                "valid": True,
                "vectors": compatible,
            }
        malformed = [malformed_vector(c) for c in MALFORMED if c.direction == direction]
        if malformed:
            files[f"malformed_{direction}.json"] = {
                "direction": direction,
                "valid": False,
                "vectors": malformed,
            }
    return files


def schema() -> dict[str, Any]:
    """The JSON Schema of every frame as decoded from msgpack (``plain``'s JSON rendering:
    msgpack bin is ``{"$bin": hex}``), one ``$defs`` entry per direction's union."""
    unions = list(DIRECTIONS.values())
    tops, defs = msgspec.json.schema_components(unions, ref_template="#/$defs/{name}")
    for name, top in zip(UNIONS, tops, strict=True):
        defs[name] = top
    defs["Binary"] = {
        "description": "msgpack bin, rendered in JSON as its bytes in lower-case hex",
        "type": "object",
        "properties": {"$bin": {"type": "string", "pattern": "^([0-9a-f]{2})*$"}},
        "required": ["$bin"],
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "fanout wire protocol frames (msgpack, decoded)",
        "description": (
            "Every frame of protocol version 1 as its msgpack value, rendered as JSON (msgpack"
            ' bin as {"$bin": hex}). Generated from fanout/wire/messages.py by'
            " python -m fanout.testing.vectors; see docs/protocol.md."
        ),
        "anyOf": [{"$ref": f"#/$defs/{name}"} for name in UNIONS],
        "$defs": _binary(dict(sorted(defs.items()))),
    }


def _binary(node: Any) -> Any:
    """msgspec's JSON spelling of bytes (base64 text) replaced by ``Binary``."""
    if node == _BINARY:
        return {"$ref": "#/$defs/Binary"}
    if isinstance(node, dict):
        return {key: _binary(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_binary(value) for value in node]
    return node


def rendered(content: Any) -> str:
    """A spec file's text: JSON, two-space indents, a final newline."""
    return json.dumps(content, indent=2, ensure_ascii=False) + "\n"


def spec_files() -> dict[str, str]:
    """Every generated file under ``spec/``, by relative path."""
    files = {f"vectors/{name}": rendered(content) for name, content in vector_files().items()}
    files["schema.json"] = rendered(schema())
    return files


def write(root: Path) -> None:
    """Write the generated files under ``root``, removing vector files no case makes."""
    files = spec_files()
    (root / "vectors").mkdir(parents=True, exist_ok=True)
    for stale in (root / "vectors").glob("*.json"):
        if f"vectors/{stale.name}" not in files:
            stale.unlink()
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else SPEC)
