"""Whether a value fits a column type (``sources.fitting``), against arithmetic on fractions."""

from __future__ import annotations

import datetime
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.publisher.sources.fitting import FLOAT32_MAX, Unfit, stored

DECIMALS = st.decimals(allow_nan=True, allow_infinity=True, places=None).filter(
    lambda d: not d.is_finite() or abs(d.adjusted()) < 60
)


@given(
    value=st.one_of(DECIMALS, st.integers(-(10**45), 10**45)),
    precision=st.integers(1, 38),
    data=st.data(),
)
def test_a_decimal_fits_exactly_when_its_scaled_value_is_an_integer_below_the_precision(
    value: Decimal | int, precision: int, data: st.DataObject
) -> None:
    """Oracle: v fits decimal(p,s) iff v * 10**s is an integer of at most p digits."""
    scale = data.draw(st.integers(0, precision))
    kind = f"decimal({precision},{scale})"
    finite = not isinstance(value, Decimal) or value.is_finite()
    scaled = Fraction(value) * 10**scale if finite else None
    fits = scaled is not None and scaled.denominator == 1 and abs(scaled) < 10**precision
    if fits:
        kept = stored("c", kind, value)
        assert Fraction(Decimal(kept)) == Fraction(value)  # exact: never rounded
        assert len(kept.partition(".")[2]) == scale
    else:
        with pytest.raises(Unfit, match=rf"column 'c' is decimal\({precision},{scale}\)"):
            stored("c", kind, value)


@given(st.one_of(st.integers(-(10**400), 10**400), st.floats()))
def test_a_float_fits_unless_it_would_become_an_infinity(value: int | float) -> None:
    """Oracle: a value given as a float fits unless it is finite beyond float32's range (an
    infinity or NaN given stays); an integer fits if it is within that range."""
    if isinstance(value, float):
        refused = math.isfinite(value) and abs(value) > FLOAT32_MAX
    else:
        refused = abs(value) >= 2**1000 or abs(float(value)) > FLOAT32_MAX
    if refused:
        with pytest.raises(Unfit, match="column 'c' is float"):
            stored("c", "float", value)
    else:
        kept = stored("c", "float", value)
        assert kept == float(value) or (math.isnan(kept) and math.isnan(value))


def test_values_of_other_types_do_not_fit() -> None:
    naive = datetime.datetime(2024, 3, 1)
    with pytest.raises(Unfit, match="a timestamp needs a time zone"):
        stored("t", "timestamp", naive)
    with pytest.raises(Unfit, match="column 'n' is long, not True"):
        stored("n", "long", True)
    with pytest.raises(Unfit, match="column 'n' is int, not 2147483648"):
        stored("n", "int", 2**31)
    with pytest.raises(Unfit, match="column 'b' is bytes, not 'text'"):
        stored("b", "bytes", "text")
    assert stored("b", "bytes", bytearray(b"\x00\xff")) == b"\x00\xff"
    assert stored("d", "double", 10**300) == 1e300
    with pytest.raises(Unfit):
        stored("d", "double", 10**400)  # beyond every float, not an OverflowError
    assert stored("x", "decimal(38,0)", 10**37 + 1) == str(10**37 + 1)  # past 28 digits
    assert stored("x", "decimal(2,0)", None) is None
