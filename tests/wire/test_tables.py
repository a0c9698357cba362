"""DataFrames and Arrow tables as wire columns (``wire.tables``): what pandas calls missing and
what Arrow's validity calls null is NULL, checked against ``isna`` and ``is_null`` themselves on
arbitrary columns; a NaN in an Arrow float slot or a numpy array stays a number."""

from __future__ import annotations

import datetime
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.wire.columns import decode_columns, encode_columns, from_values
from fanout.wire.tables import table_columns

FLOATS = st.lists(st.one_of(st.none(), st.just(math.nan), st.floats(allow_nan=False)), max_size=30)


def _nulls(array: np.ndarray) -> list[bool]:  # type: ignore[type-arg]
    return np.ma.getmaskarray(array).tolist()


@given(FLOATS)
def test_a_dataframes_missing_floats_are_null(values: list[float | None]) -> None:
    frame = pd.DataFrame({"x": pd.Series(values, dtype="float64")})
    columns = table_columns(frame)
    assert columns is not None
    wire = decode_columns(encode_columns(columns))["x"]
    assert _nulls(wire) == frame["x"].isna().tolist()
    data = np.ma.getdata(wire).tolist()
    present = [v for v, null in zip(data, _nulls(wire), strict=True) if not null]
    assert present == frame["x"].dropna().tolist()


@given(FLOATS)
def test_an_arrow_tables_nulls_are_its_validity_and_nan_a_number(
    values: list[float | None],
) -> None:
    table = pa.table({"x": pa.array(values, pa.float64(), from_pandas=False)})
    columns = table_columns(table)
    assert columns is not None
    wire = decode_columns(encode_columns(columns))["x"]
    assert _nulls(wire) == table["x"].is_null().to_pylist()
    nans = [v is not None and math.isnan(v) for v in values]
    assert np.isnan(np.ma.getdata(wire))[nans].all()


def test_a_numpy_nan_stays_a_number() -> None:
    wire = decode_columns(encode_columns({"x": from_values(np.array([1.0, np.nan]))}))["x"]
    assert not isinstance(wire, np.ma.MaskedArray) and math.isnan(wire[1])


def test_every_pandas_missing_value_of_every_type_is_null() -> None:
    frame = pd.DataFrame(
        {
            "n": pd.array([1, None], dtype="Int64"),
            "s": ["a", None],
            "b": pd.array([True, None], dtype="boolean"),
            "t": pd.to_datetime(["2026-11-29T05:00:00+01:00", None], utc=True),
            "d": [datetime.date(2026, 11, 29), None],
        }
    )
    columns = table_columns(frame)
    assert columns is not None
    wire = decode_columns(encode_columns(columns))
    for name in ("n", "b", "t", "d"):
        assert _nulls(wire[name]) == [False, True], name
    assert wire["s"].tolist() == ["a", None]
    assert wire["t"][0] == np.datetime64("2026-11-29T04:00:00", "us")  # UTC


@pytest.mark.parametrize("rows", [{"x": [1.0]}, [{"x": 1.0}], np.zeros(2), pd.Series([1.0])])
def test_anything_but_a_table_is_left_to_the_other_paths(rows: object) -> None:
    assert table_columns(rows) is None


def test_a_dataframe_arrow_cannot_convert_is_refused_saying_why() -> None:
    with pytest.raises(ValueError, match="does not convert"):
        table_columns(pd.DataFrame({"x": [1, "a"]}))
