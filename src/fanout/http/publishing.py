"""``POST /v1/publish/{dataset}``'s pure side: a JSON body in, a ``Publish`` frame out, and the
publisher's answer as an HTTP status and JSON (docs/http.md, "Writing").

The body is ``{"upserts": [{column: value, ...}, ...], "deletes": [key, ...]}``: whole rows as
objects, deletes as keys. Each value is read as the dataset's column type says (the relay's
catalog): numbers for numeric columns, ``true``/``false`` for booleans, text for strings,
decimals (or a number), timestamps (RFC 3339; without an offset: UTC) and dates
(``YYYY-MM-DD``), base64 for bytes, ``null`` for NULL. Anything else is refused here, before the
publisher sees it; what the publisher refuses (NULL in a column that holds none, a missing
column, a dataset not fed by ``ingest``) comes back with its code, as to a WebSocket producer.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.http.api import HttpError
from fanout.wire.columns import (
    DATE,
    TIMESTAMP,
    Columns,
    decimal_type,
    encode_columns,
    from_values,
)
from fanout.wire.messages import DatasetInfo, Error, Publish, Published

#: Where producers write: ``POST /v1/publish/{dataset}``.
PUBLISH = "/v1/publish/"
#: A body's bytes at most (the largest message a relay takes from a WebSocket subscriber).
MAX_BODY = 1 << 20
#: The request number a write is forwarded under on its own connection to the relay's core.
REQ = 1
#: HTTP status of each error code a write may be answered with.
STATUS = {
    "unauthorized": HTTPStatus.UNAUTHORIZED,
    "forbidden": HTTPStatus.FORBIDDEN,
    "role": HTTPStatus.FORBIDDEN,
    "invalid_view": HTTPStatus.NOT_FOUND,
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "ingest_backlog": HTTPStatus.SERVICE_UNAVAILABLE,
    "timeout": HTTPStatus.SERVICE_UNAVAILABLE,
    "internal": HTTPStatus.INTERNAL_SERVER_ERROR,
}
_JSON = msgspec.json.Encoder()


class Body(msgspec.Struct, forbid_unknown_fields=True):
    """A write's JSON body."""

    upserts: list[dict[str, Any]] = []
    deletes: list[Any] = []


def parse_publish(body: bytes, info: DatasetInfo) -> Publish:
    """The ``Publish`` a write's body stands for.

    Raises:
        HttpError: 400 ``bad_request``, naming the problem: not JSON, not the body's shape,
            nothing to write, rows with different columns, a column the dataset does not have,
            a value that does not fit its column's type.
    """
    try:
        parsed = msgspec.json.decode(body, type=Body)
    except msgspec.DecodeError as exc:
        raise _bad(f"the body is not a write: {exc}") from None
    if not parsed.upserts and not parsed.deletes:
        raise _bad('nothing to write: give "upserts" (rows as objects) or "deletes" (keys)')
    upserts = _rows(parsed.upserts, info) if parsed.upserts else Columns()
    deletes = Columns()
    if parsed.deletes:
        keys = _column("deletes", info.key, info.columns[info.key], parsed.deletes)
        deletes = encode_columns({info.key: keys})
    return Publish(req=REQ, dataset=info.name, upserts=upserts, deletes=deletes)


def answer(frame: Published | Error) -> HttpError | bytes:
    """The HTTP answer to the publisher's: the offsets' JSON (200), or the refusal."""
    if isinstance(frame, Published):
        return _JSON.encode({"first": frame.first, "last": frame.last}) + b"\n"
    return HttpError(STATUS.get(frame.code, HTTPStatus.BAD_REQUEST), frame.code, frame.message)


def _bad(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, "bad_request", message)


def _rows(rows: list[dict[str, Any]], info: DatasetInfo) -> Columns:
    names = list(rows[0])
    for index, row in enumerate(rows):
        if set(row) != set(names):
            raise _bad(f"upserts row {index} has columns {sorted(row)}, row 0 {sorted(names)}")
    for name in names:
        if name not in info.columns:
            raise _bad(f"column {name!r}: {info.name!r} has no such column ({list(info.columns)})")
    arrays = {
        name: _column("upserts", name, info.columns[name], [row[name] for row in rows])
        for name in names
    }
    return encode_columns(arrays)


def _column(where: str, name: str, dtype: str, values: Sequence[Any]) -> npt.NDArray[Any]:
    """JSON values as a column of ``dtype`` (None: NULL)."""
    read, numpy_dtype = _reader(dtype)
    typed: list[Any] = []
    for index, value in enumerate(values):
        try:
            typed.append(None if value is None else read(value))
        except (TypeError, ValueError, ArithmeticError, binascii.Error) as exc:
            raise _bad(f"{where} row {index}, column {name!r} ({dtype}): {exc}") from None
    typed_column = dtype in (TIMESTAMP, DATE) or numpy_dtype is not None
    if typed_column and all(value is None for value in typed):  # no value to type it by
        return np.ma.MaskedArray(np.zeros(len(typed), dtype), mask=True)
    column = from_values(typed)
    if numpy_dtype is None:
        return column
    data = np.ma.getdata(column)
    cast = data.astype(numpy_dtype)
    if data.dtype.kind in "iu" and np.any(cast.astype(data.dtype) != data):
        raise _bad(f"{where} column {name!r}: a value does not fit {dtype}")
    if isinstance(column, np.ma.MaskedArray):
        return np.ma.MaskedArray(cast, mask=np.ma.getmaskarray(column))
    return cast


def _reader(dtype: str) -> tuple[Callable[[Any], Any], str | None]:  # noqa: PLR0911 (a table)
    """How to read one JSON value of a column of ``dtype``, and the numpy dtype to cast to."""
    if dtype == "str":
        return _of(str, "text"), None
    if dtype == "bytes":
        return _base64, None
    if decimal_type(dtype) is not None:
        return _decimal, None
    if dtype == TIMESTAMP:
        return _timestamp, None
    if dtype == DATE:
        return lambda value: datetime.date.fromisoformat(_of(str, "a date")(value)), None
    kind = np.dtype(dtype).kind
    if kind == "b":
        return _of(bool, "true or false"), dtype
    if kind in "iu":
        return _integer, dtype
    return _number, dtype


def _of(kind: type, what: str) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {what}, got {msgspec.json.encode(value).decode()[:40]}")
        return value

    return read


def _integer(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {msgspec.json.encode(value).decode()[:40]}")
    return value


def _number(value: Any) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, got {msgspec.json.encode(value).decode()[:40]}")
    return float(value)


def _decimal(value: Any) -> decimal.Decimal:
    if type(value) not in (int, float, str):
        raise TypeError("expected a decimal, as text or a number")
    exact = decimal.Decimal(str(value))
    if not exact.is_finite():
        raise ValueError(f"{value!r} is not a finite decimal")
    return exact


def _timestamp(value: Any) -> datetime.datetime:
    instant = datetime.datetime.fromisoformat(_of(str, "an RFC 3339 timestamp")(value))
    return instant if instant.utcoffset() is not None else instant.replace(tzinfo=datetime.UTC)


def _base64(value: Any) -> bytes:
    return base64.b64decode(_of(str, "base64 text")(value), validate=True)
