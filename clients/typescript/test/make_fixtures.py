"""Write test/fixtures/*.json: payloads encoded by fanout.wire (the Python side, the reference)
with the values they decode to, for the TypeScript client's unit tests to decode.

Run from the repository's root: ``PYTHONPATH=src python clients/typescript/test/make_fixtures.py``
(tests/clients/test_typescript.py checks the committed files are what it writes).
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

from fanout.views import Box, Intersection, RegionUnion, Relative, Sector, Sphere
from fanout.views.anyof import AnyOf
from fanout.views.entity import Entity
from fanout.views.objects import parse as path
from fanout.views.sql import parse as sql
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.columns import (
    Column,
    Columns,
    decode_columns,
    encode_columns,
    from_values,
    to_python,
)
from fanout.wire.messages import NoUpdate, Push, Subscribed, Welcome

HERE = Path(__file__).parent / "fixtures"
UTC = datetime.UTC


def tagged(value: Any) -> Any:  # noqa: PLR0911 - one return per type of value
    """A decoded value as JSON the test can compare exactly."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, float):
        return {"float": "NaN" if math.isnan(value) else repr(value)}
    if isinstance(value, int):
        return value if abs(value) <= 2**53 - 1 else {"int": str(value)}
    if isinstance(value, datetime.datetime):
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=UTC)
        return {
            "timestamp": str((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
        }
    if isinstance(value, datetime.date):
        return {"date": (value - datetime.date(1970, 1, 1)).days}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    raise TypeError(type(value))


def good(name: str, columns: dict[str, Any]) -> dict[str, Any]:
    payload = encode_columns(columns)
    decoded = {n: [tagged(v) for v in to_python(a)] for n, a in decode_columns(payload).items()}
    return {"name": name, "msgpack": msgspec.msgpack.encode(payload).hex(), "columns": decoded}


def bad(name: str, payload: Columns, error: str) -> dict[str, Any]:
    try:
        decode_columns(payload)
    except Exception as exc:
        assert error in str(exc), (error, str(exc))
    else:
        raise AssertionError(f"{name}: Python decodes it")
    return {"name": name, "msgpack": msgspec.msgpack.encode(payload).hex(), "error": error}


def columns_fixtures() -> list[dict[str, Any]]:
    ts = datetime.datetime(2026, 11, 29, 4, 47, 25, 123456, tzinfo=UTC)
    early = datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    i8 = np.array([1, -2, 2**62], dtype="<i8")
    return [
        good("integers with a null", {"id": from_values([7, None, -3])}),
        good("int64 past 2^53", {"big": i8, "u8": np.array([0, 2**63, 5], dtype="<u8")}),
        good(
            "small integers",
            {
                "i4": np.array([-(2**31), 0, 2**31 - 1], dtype="<i4"),
                "i2": np.array([-5, 0, 300], dtype="<i2"),
                "i1": np.array([-128, 0, 127], dtype="|i1"),
                "u1": np.array([0, 200, 255], dtype="|u1"),
                "u2": np.array([0, 65535, 1], dtype="<u2"),
                "u4": np.array([0, 2**32 - 1, 1], dtype="<u4"),
            },
        ),
        good(
            "floats: NaN is a number, None a null",
            {
                "x": from_values([1.5, math.nan, None]),
                "f4": np.array([0.5, -2.25, 3e38], dtype="<f4"),
            },
        ),
        good("booleans with a null", {"ok": from_values([True, None, False])}),
        good("strings with a null", {"name": from_values(["a", None, "ü"])}),
        good(
            "decimals with a null",
            {"fare": from_values([decimal.Decimal("12.50"), None, decimal.Decimal("-0.01")])},
        ),
        good(
            "bytes with a null, empty and NULs", {"data": from_values([b"\x00\x01\x00", None, b""])}
        ),
        good("bytes without a null", {"data": from_values([b"ab", b"c", b""])}),
        good("timestamps with a null", {"at": from_values([ts, None, early])}),
        good(
            "dates with a null",
            {"day": from_values([datetime.date(2026, 11, 29), None, datetime.date(1969, 12, 31)])},
        ),
        good("no rows", {"id": np.array([], dtype="<i8"), "name": np.array([], dtype=object)}),
        good("a null in every row", {"x": np.ma.MaskedArray(np.zeros(9), mask=[True] * 9)}),
        bad("a validity bitmap first", Columns(1, [Column("x", "valid", b"\x01")]), "must follow"),
        bad(
            "a validity bitmap after a string",
            Columns(1, [Column("s", "str", ["a"]), Column("s", "valid", b"\x01")]),
            "must follow",
        ),
        bad(
            "a validity bitmap too short",
            Columns(9, [Column("x", "|i1", b"\x00" * 9), Column("x", "valid", b"\x01")]),
            "a validity bitmap of 9 rows is 2 bytes",
        ),
        bad(
            "numbers too short",
            Columns(2, [Column("x", "<i8", b"\x00" * 15)]),
            "15 bytes, expected 2 rows x 8 bytes",
        ),
        bad("an unknown dtype", Columns(1, [Column("x", "<c16", b"\x00" * 16)]), "unknown dtype"),
        bad(
            "strings of another length",
            Columns(2, [Column("s", "str", ["a"])]),
            "expected a list of 2 strings",
        ),
        bad(
            "a decimal that is not one",
            Columns(1, [Column("d", "decimal", ["1.2.3"])]),
            "not a decimal",
        ),
        bad(
            "bytes offsets past the data",
            Columns(1, [Column("b", "bytes", b"\x00\x00\x00\x00\x05\x00\x00\x00ab")]),
            "offsets do not fit",
        ),
        bad(
            "a duplicate column",
            Columns(1, [Column("x", "|u1", b"\x01"), Column("x", "|u1", b"\x02")]),
            "duplicate column",
        ),
        bad("a negative length", Columns(-1, []), "negative length"),
    ]


def frames_fixtures() -> list[dict[str, Any]]:
    entered = encode_columns({"id": np.array([1, 2], dtype="<i8"), "x": from_values([0.5, None])})
    left = encode_columns({"id": np.array([1], dtype="<i8")})
    frames = [
        Welcome(version=1, server="relay", session="abc", datasets={"agents": "space"}),
        Subscribed(sub=1, key="id", columns=["id", "x"]),
        Push(1, 1764391645000, 3, 30, 1764391645.5, True, entered, Columns(), Columns()),
        NoUpdate(1, 1764391645000, 4, 40),
        Push(1, 1764391645000, 5, 50, 1764391646.5, False, Columns(), Columns(), left),
    ]
    return [{"frames": [codec.encode(f).hex() for f in frames]}]


def views_fixtures() -> list[dict[str, Any]]:
    """Each view as fanout.views encodes it, with the TypeScript builder call that makes it."""
    box, disc = Box((0, 0), (10, 10)), Sphere((5, 5), 3)
    cases: list[tuple[list[Any], Any]] = [
        (["box", [0, 0], [10, 10]], box),
        (["sphere", [1, 2, 3], 4], Sphere((1, 2, 3), 4)),
        (["sector", [0, 0], 5, 0.5, 1], Sector((0, 0), 5, 0.5, 1.0)),
        (["sector", [0, 0, 0], 5, [0.5, 0.25], 1], Sector((0, 0, 0), 5, (0.5, 0.25), 1.0)),
        (["union", ["box", [0, 0], [10, 10]], ["sphere", [5, 5], 3]], RegionUnion([box, disc])),
        (["meet", ["box", [0, 0], [10, 10]], ["sphere", [5, 5], 3]], Intersection([box, disc])),
        (["relative", 42, ["sphere", [0, 0], 50]], Relative(42, Sphere((0, 0), 50))),
        (
            ["relative", "car-7", ["box", [-1, -1], [1, 1]]],
            Relative("car-7", Box((-1, -1), (1, 1))),
        ),
        (
            ["sql", "SELECT * FROM orders WHERE amount > 100"],
            sql("SELECT * FROM orders WHERE amount > 100"),
        ),
        (["topic", "plant/+/temp"], topic("plant/+/temp")),
        (["path", "/cars/.all"], path("/cars/.all")),
        (["anyOf", ["topic", "a/#"], ["topic", "b/+"]], AnyOf((topic("a/#"), topic("b/+")))),
        (["entity", 7], Entity(7)),
    ]
    return [{"call": call, "view": msgspec.to_builtins(view)} for call, view in cases]


def write(directory: Path = HERE) -> list[Path]:
    """Write the fixtures into ``directory``; return their paths."""
    directory.mkdir(exist_ok=True)
    written = []
    makers = (("columns", columns_fixtures), ("frames", frames_fixtures), ("views", views_fixtures))
    for name, make in makers:
        written.append(directory / f"{name}.json")
        written[-1].write_text(json.dumps(make(), indent=1) + "\n")
    return written


if __name__ == "__main__":
    write()
    sys.exit(0)
