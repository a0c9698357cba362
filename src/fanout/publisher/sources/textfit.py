"""Values of JSON and CSV files fitted to their column types inside Spark.

The rules are ``sources.fitting``'s (one set for every source; docs/configuration.md,
"Sources"), applied to the files' text with Spark expressions instead of Spark's own parsing,
which rounds, guesses a zone or overflows where they refuse: a ``decimal(p,s)`` is never
rounded, a ``timestamp`` names its zone, a finite ``double`` or ``float`` beyond its range does
not fit, CSV ``bytes`` are base64. A JSON number is read as written up to 38 plain digits, else
as a double, then checked.

``fit`` gives the value a row keeps and its problem (NULL when it fits), worded as
``fitting.unfit`` words it. A NULL fits every column.
"""

from __future__ import annotations

import pyspark.sql.functions as sf
from pyspark.sql import Column

from fanout.publisher.datasets import ColumnType, decimal_of, spark_type
from fanout.publisher.sources.fitting import FLOAT32_MAX

#: A number in plain or exponent notation, blanks around it allowed (as Spark's casts allow).
NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
#: A zone after a time of day: Z, an offset, UTC/GMT (with an offset or not), or a region.
_OFFSET = r"[+-]\d{1,2}(:?\d{2}){0,2}"
ZONED = (
    r"(?i)\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?\s*"
    rf"(z|{_OFFSET}|(utc|gmt|ut)({_OFFSET})?|[a-z]+(/[a-z0-9_+-]+)+)\s*$"
)
#: Base64 as RFC 4648 writes it: groups of four, padded.
BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def parse_type(kind: ColumnType, fmt: str) -> str:
    """The Spark type a column of type ``kind`` is parsed as from a ``fmt`` file.

    Args:
        kind: the declared column type.
        fmt: ``"json"`` or ``"csv"``.

    Returns:
        ``string`` (CSV decimals, timestamps and bytes; JSON timestamps), ``variant`` (JSON
        decimals: a number keeps its digits), else the column's own Spark type.
    """
    if kind == "timestamp" or (fmt == "csv" and (kind == "bytes" or decimal_of(kind))):
        return "string"
    if decimal_of(kind):
        return "variant"
    return spark_type(kind)


def fit(
    name: str, kind: ColumnType, fmt: str, parsed: Column, raw: Column
) -> tuple[Column, Column]:
    """A parsed column's value as the row keeps it, and its problem.

    Args:
        name: the column's name.
        kind: its declared type.
        fmt: ``"json"`` or ``"csv"``.
        parsed: the column as parsed with ``parse_type``.
        raw: the column's text as the file spells it (evaluated only on a ``double`` or
            ``float`` that parsed as an infinity): for JSON, the JSON value as a variant
            (NULL if the line does not parse as standard JSON, as with a bare ``Infinity``);
            for CSV, the field's text.

    Returns:
        (value, problem): the value of the declared type (NULL where it does not fit), and a
        text naming the column, its type and the value where it does not fit, else NULL.
    """
    found = decimal_of(kind)
    if found is not None:
        text = parsed.cast("string")
        fits = decimal_fits(text, *found)
        return sf.when(fits, text.try_cast(spark_type(kind))), _problem(name, kind, text, fits)
    if kind == "timestamp":
        value = parsed.try_cast("timestamp")
        zoned = parsed.rlike(ZONED)
        fits = parsed.isNull() | (value.isNotNull() & zoned)
        why = sf.when(value.isNotNull(), sf.lit(" (a timestamp needs a time zone)"))
        return sf.when(fits, value), _problem(name, kind, parsed, fits, why)
    if kind == "bytes" and fmt == "csv":
        fits = parsed.isNull() | parsed.rlike(BASE64)
        value = sf.when(fits, sf.try_to_binary(parsed, sf.lit("base64")))
        return value, _problem(name, kind, parsed, fits, sf.lit(" (bytes are base64)"))
    if kind in ("double", "float"):
        if fmt == "json":  # a number, not a string nor a bare Infinity
            number = raw.isNotNull() & (sf.schema_of_variant(raw) != sf.lit("STRING"))
            text = raw.cast("string")
        else:
            number = raw.rlike(NUMBER)
            text = raw
        # Evaluated only on an infinity (CASE WHEN evaluates a branch only where it holds).
        overflow = sf.when(parsed.isin(float("inf"), float("-inf")), number)
        fits = sf.coalesce(~overflow, sf.lit(True))
        limit = "double" if kind == "double" else f"float (at most {FLOAT32_MAX:.7g})"
        problem = sf.when(
            ~fits,
            sf.concat(
                sf.lit(f"column {name!r} is {kind}, not "),
                sf.coalesce(text, sf.lit("a number")),
                sf.lit(f" (beyond a {limit})"),
            ),
        )
        return parsed, problem
    return parsed, sf.lit(None).cast("string")


def decimal_fits(text: Column, precision: int, scale: int) -> Column:
    """Whether ``text`` is a decimal number whose digits fit ``decimal(precision, scale)``
    exactly (NULL fits).

    The digits are counted, not converted: with leading and trailing zeros gone, the point's
    place (moved by an exponent) splits them into those before the point (at most
    ``precision - scale``) and after it (at most ``scale``).
    """
    whole = sf.regexp_extract(text, r"^\s*[+-]?(\d*)", 1)
    fraction = sf.regexp_extract(text, r"\.(\d*)", 1)
    exponent = sf.regexp_extract(text, r"[eE]([+-]?\d+)", 1)
    shift = sf.when(exponent == "", sf.lit(0)).otherwise(exponent.try_cast("int"))
    digits = sf.concat(whole, fraction)
    unled = sf.regexp_replace(digits, r"^0+", "")
    significant = sf.regexp_replace(unled, r"0+$", "")
    # The point's place in ``significant``: after this many of its digits (<= 0: before all).
    point = sf.length(whole) + shift - (sf.length(digits) - sf.length(unled))
    before = sf.greatest(point, sf.lit(0))
    after = sf.greatest(sf.length(significant) - point, sf.lit(0))
    exact = (significant == "") | (
        point.isNotNull() & (before <= precision - scale) & (after <= scale)
    )
    return text.isNull() | (text.rlike(NUMBER) & sf.coalesce(exact, sf.lit(False)))


def _problem(
    name: str, kind: ColumnType, text: Column, fits: Column, why: Column | None = None
) -> Column:
    """``column 'c' is <kind>, not <text><why>`` where the value does not fit, else NULL."""
    parts = [sf.lit(f"column {name!r} is {kind}, not "), text]
    if why is not None:
        parts.append(sf.coalesce(why, sf.lit("")))
    return sf.when(~fits, sf.concat(*parts))
