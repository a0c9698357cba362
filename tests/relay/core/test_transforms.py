"""Transforms: projection, precision, fixed point, relative coordinates, capabilities."""

from __future__ import annotations

import numpy as np
import pytest

from fanout.relay.core.transforms import InvalidTransform, Shape, apply, resolve
from fanout.relay.data.nulls import valid_of
from fanout.testing.catalog import agents
from fanout.wire.messages import Transform

INFO = agents(kind="<i4", label="str")
ROWS = {
    "id": np.array([1, 2], dtype=np.int64),
    "x": np.array([10.25, -3.5]),
    "y": np.array([0.1, 1e30]),
    "kind": np.array([7, 8], dtype=np.int32),
    "label": np.array(["a", "b"], dtype=object),
}


def test_no_transform_sends_every_column_as_stored() -> None:
    shape = resolve(None, INFO)
    assert shape.identity
    assert shape.columns == ("id", "x", "y", "kind", "label")
    assert apply(ROWS, shape, None)["y"] is ROWS["y"]


def test_projection_keeps_the_key_first_and_refuses_unknown_columns() -> None:
    shape = resolve(Transform(columns=["y", "kind", "y"]), INFO)
    assert shape.columns == ("id", "y", "kind")
    assert list(apply(ROWS, shape, None)) == ["id", "y", "kind"]
    with pytest.raises(InvalidTransform, match="no column\\(s\\) 'z', 'w'"):
        resolve(Transform(columns=["x", "z", "w"]), INFO)


def test_float32_converts_floats_only() -> None:
    out = apply(ROWS, resolve(Transform(precision="float32"), INFO), None)
    assert out["x"].dtype == np.float32
    assert out["kind"].dtype == np.int32
    assert out["x"].tolist() == [10.25, -3.5]


def test_fixed_point_counts_quanta_and_saturates() -> None:
    shape = resolve(Transform(precision="fixed", quantum=0.5), INFO)
    out = apply(ROWS, shape, None)
    assert out["x"].dtype == np.int64
    assert out["x"].tolist() == [20, -7]  # 10.25 / 0.5 = 20.5 rounds to even
    assert out["y"].tolist() == [0, 2**63 - 1024]  # 1e30 saturates
    nan = apply({**ROWS, "x": np.array([np.nan, 1.0])}, shape, None)
    assert nan["x"].tolist() == [Transform.FIXED_NAN, 2]


def test_a_float_rounding_quantum() -> None:
    out = apply(ROWS, resolve(Transform(quantum=0.5), INFO), None)
    assert out["x"].tolist() == [10.0, -3.5]


def test_coordinates_relative_to_an_entity() -> None:
    shape = resolve(Transform(columns=["x", "kind"], relative_to=2), INFO)
    assert shape.relative == ("x",)
    out = apply(ROWS, shape, (-3.5,))
    assert out["x"].tolist() == [13.75, 0.0]
    assert out["kind"].tolist() == [7, 8]


@pytest.mark.parametrize(
    ("transform", "message"),
    [
        (Transform(relative_to="7"), "keys of dataset 'agents' are an integer"),
        (Transform(relative_to=True), "keys of dataset 'agents' are an integer"),
        (Transform(quantum=-1.0), "quantum -1.0 must be"),
        (Transform(quantum=float("inf")), "quantum inf must be"),
    ],
)
def test_bad_transforms_are_refused(transform: Transform, message: str) -> None:
    with pytest.raises(InvalidTransform, match=message):
        resolve(transform, INFO)


@pytest.mark.parametrize(
    ("asked", "capabilities", "precision"),
    [
        ("float64", [], "float64"),  # nothing declared: everything goes
        ("float64", ["float64", "float32", "fixed"], "float64"),
        ("float64", ["float32"], "float32"),
        ("float32", ["float64"], "float64"),
        ("float64", ["fixed"], "fixed"),  # no floating point: fixed point
        ("float32", ["fixed", "hologram"], "fixed"),  # unknown names are ignored
        ("fixed", ["float64"], "fixed"),
    ],
)
def test_capabilities_decide_the_number_format(
    asked: str, capabilities: list[str], precision: str
) -> None:
    shape = resolve(Transform(precision=asked), INFO, capabilities)  # type: ignore[arg-type]
    assert shape.precision == precision
    if precision == "fixed":
        assert shape.quantum == Transform.DEFAULT_QUANTUM
    assert Transform(precision=asked).negotiate(capabilities).precision == precision  # type: ignore[arg-type]


def test_equal_transforms_resolve_to_equal_shapes() -> None:
    first = resolve(Transform(columns=["x"], precision="float32"), INFO)
    second = resolve(Transform(columns=["x"], precision="float32"), INFO, ["float32"])
    assert first == second
    assert hash(first) == hash(second)
    assert isinstance(first, Shape)


def test_null_stays_null_whatever_the_precision() -> None:
    valid = np.array([False, True])
    rows = {**ROWS, valid_of("x"): valid, valid_of("kind"): valid}
    for transform in (Transform(precision="fixed", quantum=0.5), Transform(columns=["x"])):
        out = apply(rows, resolve(transform, INFO), None)
        assert out[valid_of("x")] is valid  # the value's validity goes with it
        assert valid_of("kind") in out or "kind" not in out
