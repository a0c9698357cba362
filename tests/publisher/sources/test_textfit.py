"""Files' text fitted to column types in Spark (``sources.textfit``), against arithmetic on
fractions and Python's own ISO 8601 parsing, and against the producers' rules
(``sources.fitting``) on the same values."""

from __future__ import annotations

import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyspark.sql.functions as sf
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher.sources.fitting import Unfit, stored
from fanout.publisher.sources.textfit import fit, parse_type

pytestmark = pytest.mark.spark

UTC = datetime.UTC


def fitted(spark: Any, kind: str, fmt: str, texts: list[str | None]) -> list[tuple[Any, Any]]:
    """(value, problem) of each text as a column of type ``kind`` read from a ``fmt`` file."""
    frame = spark.createDataFrame([(text,) for text in texts], "text string")
    parsed = sf.col("text")
    if parse_type(kind, fmt) == "variant":
        parsed = sf.when(parsed.isNotNull(), sf.try_parse_json(parsed))
    value, problem = fit("c", kind, fmt, parsed, parsed)
    rows = frame.select(value.alias("v"), problem.alias("p")).collect()
    return [(row["v"], row["p"]) for row in rows]


def spellings(value: Decimal, style: int) -> str:
    """One of several ways a file may spell ``value``."""
    if style == 0:
        return format(value, "f")
    if style == 1:
        return str(value)  # exponent notation for very small or large ones
    if style == 2:
        return f"+00{format(value, 'f')}" if value >= 0 else format(value, "f")
    return format(value, "e")


DECIMALS = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda d: abs(d.adjusted()) < 40
)


KINDS = st.integers(1, 38).flatmap(
    lambda precision: st.integers(0, precision).map(lambda scale: (precision, scale))
)


@settings(max_examples=4)
@given(
    values=st.lists(st.tuples(DECIMALS, st.integers(0, 3)), min_size=1, max_size=60),
    kinds=st.lists(KINDS, min_size=1, max_size=8, unique=True),
)
def test_decimal_text_fits_exactly_when_its_scaled_value_is_an_integer_below_the_precision(
    spark, values: list[tuple[Decimal, int]], kinds: list[tuple[int, int]]
) -> None:
    """Oracle: v fits decimal(p,s) iff v * 10**s is an integer of fewer than p digits; a value
    that fits keeps every digit; the producers' rules say the same of the text. (Each example
    checks its texts against several column types in one Spark job.)"""
    texts = [spellings(value, style) for value, style in values]
    frame = spark.createDataFrame([(text,) for text in texts], "text string")
    names = [f"decimal({precision},{scale})" for precision, scale in kinds]
    columns = []
    for i, kind in enumerate(names):
        value, problem = fit("c", kind, "csv", sf.col("text"), sf.col("text"))
        columns += [value.alias(f"v{i}"), problem.alias(f"p{i}")]
    rows = frame.select(*columns).collect()
    for (precision, scale), kind, i in zip(kinds, names, range(len(names)), strict=True):
        for text, row in zip(texts, rows, strict=True):
            value, problem = row[f"v{i}"], row[f"p{i}"]
            scaled = Fraction(Decimal(text)) * 10**scale
            fits = scaled.denominator == 1 and abs(scaled) < 10**precision
            assert (problem is None) == fits, (text, kind, problem)
            if fits:
                assert Fraction(value) == Fraction(Decimal(text)), (text, value)
                assert Decimal(stored("c", kind, text)) == value
            else:
                assert value is None
                assert problem == f"column 'c' is {kind}, not {text}"
                with pytest.raises(Unfit):
                    stored("c", kind, text)


def test_decimal_text_that_is_no_number_does_not_fit(spark) -> None:
    texts = ["abc", "NaN", "Infinity", "1e", "1.2.3", "0x10", "1_000", " ", "true", None, " 4 "]
    got = fitted(spark, "decimal(6,2)", "csv", texts)
    assert [value for value, _ in got[-2:]] == [None, Decimal("4.00")]
    assert all(problem is None for _, problem in got[-2:])
    for text, (value, problem) in zip(texts[:-2], got[:-2], strict=True):
        assert value is None and problem == f"column 'c' is decimal(6,2), not {text}"


def test_json_decimals_keep_their_digits(spark) -> None:
    """A JSON number of up to 38 digits is read as written, not through a double."""
    texts = ["1234567890123456.78", '"0.125"', "1.5e2", "0.10000", "1e-05", "12345678901234567.891"]
    got = fitted(spark, "decimal(18,2)", "json", texts)
    assert got[0] == (Decimal("1234567890123456.78"), None)
    assert got[1] == (None, "column 'c' is decimal(18,2), not 0.125")
    assert got[2] == (Decimal("150.00"), None)  # exponent notation: through a double
    assert got[3] == (Decimal("0.10"), None)
    assert got[4][0] is None and got[4][1].startswith("column 'c' is decimal(18,2), not 1.0E-5")
    assert got[5] == (None, "column 'c' is decimal(18,2), not 12345678901234567.891")


def test_a_timestamp_needs_a_zone(spark) -> None:
    """Oracle: Python's ``fromisoformat`` (3.11 reads ``Z`` and offsets) for the ISO texts."""
    texts = [
        "2024-03-01T10:00:00.000001Z",
        "2024-03-01 10:00:00+02:00",
        "2024-03-01T10:00:00-0530",
        "2024-03-01T10:00:00+02",
        "2024-03-01T10:00:00",
        "2024-03-01 10:00:00.5",
        "2024-03-01",
        "2024-03-01-05",
    ]
    zoned = {
        "2024-03-01T10:00:00 Europe/Paris": datetime.datetime(2024, 3, 1, 9, tzinfo=UTC),
        "2024-03-01T10:00:00 UTC": datetime.datetime(2024, 3, 1, 10, tzinfo=UTC),
        "2024-03-01T10:00:00GMT+01:00": datetime.datetime(2024, 3, 1, 9, tzinfo=UTC),
    }
    bad = ["yesterday", "2024-13-01T00:00:00Z", "1700000000"]
    got = fitted(spark, "timestamp", "json", [*texts, *zoned, *bad, None])
    for text, (value, problem) in zip(texts, got, strict=False):
        try:
            expected = datetime.datetime.fromisoformat(text)
        except ValueError:
            expected = None
        if expected is not None and expected.utcoffset() is not None:
            assert problem is None, text
            naive_utc = expected.astimezone(UTC).replace(tzinfo=None)
            assert value == naive_utc, text  # Spark's rows are naive, in the session's UTC
        else:
            assert value is None, text
            assert problem.startswith(f"column 'c' is timestamp, not {text}"), problem
    for (text, expected), (value, problem) in zip(zoned.items(), got[len(texts) :], strict=False):
        assert problem is None and value == expected.replace(tzinfo=None), text
    naive = dict(zip(texts, got, strict=False))["2024-03-01T10:00:00"][1]
    assert (
        naive == "column 'c' is timestamp, not 2024-03-01T10:00:00 (a timestamp needs a time zone)"
    )
    for text, (value, problem) in zip(bad, got[len(texts) + len(zoned) :], strict=False):
        assert value is None and problem.startswith(f"column 'c' is timestamp, not {text}")
    assert got[-1] == (None, None)


def test_a_number_beyond_a_float_is_refused_an_infinity_given_is_kept(spark) -> None:
    frame = spark.createDataFrame(
        [("1e39", "1e39"), ("Inf", "Inf"), ("3.4e38", "3.4e38"), (None, None)],
        "text string, raw string",
    )
    value, problem = fit("c", "float", "csv", sf.col("text").cast("float"), sf.col("raw"))
    rows = frame.select(value.alias("v"), problem.alias("p")).collect()
    assert rows[0]["p"] == "column 'c' is float, not 1e39 (beyond a float (at most 3.402823e+38))"
    assert rows[1]["v"] == float("inf") and rows[1]["p"] is None
    assert rows[2]["p"] is None and rows[3]["p"] is None


def test_csv_bytes_are_base64(spark) -> None:
    texts = ["AP8=", "YWJj", "YQ==", "AP8", "YW I=", "!", "YQ=", None]
    got = fitted(spark, "bytes", "csv", texts)
    assert [value for value, _ in got[:3]] == [b"\x00\xff", b"abc", b"a"]
    assert all(problem is None for _, problem in got[:3]) and got[-1] == (None, None)
    for text, (value, problem) in zip(texts[3:-1], got[3:-1], strict=True):
        assert value is None
        assert problem == f"column 'c' is bytes, not {text} (bytes are base64)"
