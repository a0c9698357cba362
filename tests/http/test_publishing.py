"""A write's JSON body read as the dataset's column types say (``http.publishing``): every type
travels as a WebSocket producer's would, NULL as NULL; a value that does not fit is refused
naming its row and column; the publisher's answers map to HTTP statuses."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from fanout.http.api import HttpError
from fanout.http.publishing import answer, parse_publish
from fanout.wire.columns import decode_columns, to_python
from fanout.wire.messages import DatasetInfo, Error, Published

TYPES = DatasetInfo(
    "every",
    "id",
    {
        "id": "<i8",
        "name": "str",
        "x": "<f4",
        "small": "|i1",
        "ok": "|b1",
        "fare": "decimal(8,2)",
        "at": "<M8[us]",
        "day": "<M8[D]",
        "data": "bytes",
    },
    "sql",
    [],
)
ROW = (
    b'{"id": 1, "name": "a", "x": 1, "small": -3, "ok": true, "fare": "12.50",'
    b' "at": "2026-11-29T05:00:00+01:00", "day": "2026-11-29", "data": "AP8="}'
)
NULLS = (
    b'{"id": 2, "name": null, "x": null, "small": null, "ok": null, "fare": null,'
    b' "at": null, "day": null, "data": null}'
)


def test_every_column_type_is_read_as_the_catalog_says_and_null_is_null() -> None:
    write = parse_publish(b'{"upserts": [' + ROW + b", " + NULLS + b'], "deletes": [3]}', TYPES)
    columns = decode_columns(write.upserts)
    values = {name: to_python(array) for name, array in columns.items()}
    assert values["x"] == [1.0, None] and columns["x"].dtype == "<f4"
    assert values["small"] == [-3, None] and columns["small"].dtype == "|i1"
    assert values["ok"] == [True, None] and values["name"] == ["a", None]
    assert values["fare"] == [Decimal("12.50"), None] and values["data"] == [b"\x00\xff", None]
    assert values["at"] == [datetime.datetime(2026, 11, 29, 4, tzinfo=datetime.UTC), None]
    assert values["day"] == [datetime.date(2026, 11, 29), None]
    assert decode_columns(write.deletes)["id"].tolist() == [3]


def test_a_column_of_nulls_keeps_its_type() -> None:
    write = parse_publish(b'{"upserts": [{"id": 1, "x": null, "at": null}]}', TYPES)
    columns = decode_columns(write.upserts)
    assert columns["x"].dtype == "<f4" and columns["at"].dtype == "<M8[us]"
    assert columns["x"].mask.tolist() == [True]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"upserts": [{"id": true}]}', "row 0, column 'id' (<i8): expected an integer"),
        (b'{"upserts": [{"id": 1, "ok": 1}]}', "expected true or false"),
        (b'{"upserts": [{"id": 1, "small": 300}]}', "does not fit |i1"),
        (b'{"upserts": [{"id": 1, "fare": "NaN"}]}', "not a finite decimal"),
        (b'{"upserts": [{"id": 1, "fare": [1]}]}', "expected a decimal"),
        (b'{"upserts": [{"id": 1, "at": "yesterday"}]}', "column 'at'"),
        (b'{"upserts": [{"id": 1, "day": 20261129}]}', "expected a date"),
        (b'{"upserts": [{"id": 1, "data": "!!"}]}', "column 'data'"),
        (b'{"upserts": [{"id": 1, "name": 5}]}', "expected text"),
        (b'{"upserts": "rows"}', "Expected `array`"),
        (b"\xff", "not a write"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_naming_where(body: bytes, says: str) -> None:
    with pytest.raises(HttpError) as refused:
        parse_publish(body, TYPES)
    assert refused.value.status == 400 and refused.value.code == "bad_request"
    assert says in refused.value.message


def test_the_publishers_answers_map_to_statuses() -> None:
    assert answer(Published(1, 4, 5)) == b'{"first":4,"last":5}\n'
    statuses = {
        code: answer(Error(code, "why", ref=1)).status  # type: ignore[union-attr]
        for code in ("bad_request", "protocol", "invalid_view", "forbidden", "role")
    }
    assert statuses == {
        "bad_request": 400,
        "protocol": 400,
        "invalid_view": 404,
        "forbidden": 403,
        "role": 403,
    }
    for code in ("unavailable", "ingest_backlog"):
        assert answer(Error(code, "later", ref=1)).status == 503  # type: ignore[union-attr]
