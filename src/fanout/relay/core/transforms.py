"""Adapting a subscription's rows for its subscriber (CA 3197003 [0091]-[0093]).

A ``Transform`` is resolved once, at subscribe time, against the dataset and the subscriber's
capabilities into a :class:`Shape` (columns, number format, reference entity), or refused with
:class:`InvalidTransform` (``Error{invalid_transform}``). Equal shapes hash equal, so pushes of
equal view and shape share one encoding. :func:`apply`, in this order:

1. projection: the shape's columns, key first;
2. relative coordinates: index columns minus the reference entity's position at the push's tick
   (:class:`EntityNotHeld` ends the subscription); none without index columns;
3. precision, floating-point columns only: ``float32``, or ``fixed`` int64 counts of ``quantum``
   (rounded to nearest, saturating, NaN as ``Transform.FIXED_NAN``), and optionally rounding
   to a multiple of ``quantum``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Literal, cast

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.errors import FanoutError
from fanout.relay.data.nulls import valid_of
from fanout.wire.columns import STRING
from fanout.wire.messages import DatasetInfo, Transform

Array = npt.NDArray[np.generic]
Precision = Literal["float64", "float32", "fixed"]

#: ``fixed`` values saturate here: the largest float64 magnitudes below 2**63.
_FIXED_MAX = float(np.nextafter(2.0**63, 0.0))
_FIXED_MIN = -_FIXED_MAX


class InvalidTransform(FanoutError, ValueError):
    """A subscription's transform cannot be applied to its dataset."""

    code = "invalid_transform"


class EntityNotHeld(FanoutError):
    """The entity coordinates are relative to is not in the relay's state."""

    code = "entity_not_held"


class Shape(msgspec.Struct, frozen=True, cache_hash=True):
    """A transform resolved for one dataset and one subscriber's capabilities.

    A frozen struct: hashed and compared in C, as every push looks its body up by shape.

    Attributes:
        columns: the columns sent, key first.
        precision: the number format of floating-point columns.
        quantum: the ``fixed`` unit, or the float rounding step (0: none).
        relative_to: the reference entity's key, or None.
        relative: the index columns sent (those made relative to the entity).
        identity: rows go out exactly as stored.
    """

    columns: tuple[str, ...]
    precision: Precision = "float64"
    quantum: float = 0.0
    relative_to: int | str | None = None
    relative: tuple[str, ...] = ()
    identity: bool = False


def resolve(
    transform: Transform | None, info: DatasetInfo, capabilities: Sequence[str] = ()
) -> Shape:
    """Resolve ``transform`` for ``info``'s dataset and a subscriber's ``capabilities``.

    Raises:
        InvalidTransform: an unknown column, a quantum that is negative or not finite, or a
            ``relative_to`` key of the wrong type for the dataset's key.
    """
    effective = (transform or Transform()).negotiate(capabilities)
    columns = _columns(effective, info)
    if not math.isfinite(effective.quantum) or effective.quantum < 0:
        raise InvalidTransform(
            f"quantum {effective.quantum!r} must be a finite number >= 0 (0: no rounding)"
        )
    entity = effective.relative_to
    if entity is not None:
        _check_entity(entity, info)
    relative = tuple(c for c in info.index_columns if c in columns) if entity is not None else ()
    identity = (
        columns == tuple(_all_columns(info))
        and effective.precision == "float64"
        and effective.quantum == 0.0
        and entity is None
    )
    return Shape(columns, effective.precision, effective.quantum, entity, relative, identity)


def _all_columns(info: DatasetInfo) -> list[str]:
    return [info.key, *(name for name in info.columns if name != info.key)]


def _columns(transform: Transform, info: DatasetInfo) -> tuple[str, ...]:
    if transform.columns is None:
        return tuple(_all_columns(info))
    unknown = [name for name in transform.columns if name not in info.columns]
    if unknown:
        raise InvalidTransform(
            f"dataset {info.name!r} has no column(s) {', '.join(map(repr, unknown))}"
            f" (it has {', '.join(info.columns)})"
        )
    wanted = dict.fromkeys([info.key, *transform.columns])
    return tuple(wanted)


def _check_entity(entity: int | str, info: DatasetInfo) -> None:
    if not info.index_columns:
        raise InvalidTransform(f"dataset {info.name!r} has no coordinates to make relative")
    key_is_str = info.columns[info.key] == STRING
    if isinstance(entity, bool) or isinstance(entity, str) != key_is_str:
        kind = "a string" if key_is_str else "an integer"
        raise InvalidTransform(f"relative_to {entity!r}: keys of dataset {info.name!r} are {kind}")


#: How much coarser ``coarser`` rounds a view that asked for rounding (its quantum times this).
COARSER = 4.0


@functools.cache
def coarser(shape: Shape) -> Shape:
    """``shape`` at coarser detail, for a link that cannot carry it (``relay.core.links``):
    floating-point columns as ``float32``, rounded to ``COARSER`` times its quantum if it asked
    for rounding. A ``fixed`` shape stays as it is: its quantum is its unit on the wire."""
    if shape.precision == "fixed":
        return shape
    return msgspec.structs.replace(
        shape, precision="float32", quantum=shape.quantum * COARSER, identity=False
    )


def apply(
    rows: Mapping[str, Array], shape: Shape, anchor: Sequence[float] | None
) -> dict[str, Array]:
    """Adapt rows (column -> array, every column of ``shape``) to ``shape``.

    Args:
        rows: the rows as stored.
        shape: the resolved transform.
        anchor: the reference entity's position, one value per column of ``shape.relative``
            (None when the shape has no ``relative_to``).
    """
    if shape.identity:
        return dict(rows)
    offsets = dict(zip(shape.relative, anchor or (), strict=True))
    out: dict[str, Array] = {}
    for name in shape.columns:
        values = rows[name]
        if name in offsets:
            values = values - np.asarray(offsets[name], dtype=values.dtype)
        if values.dtype.kind == "f":
            values = _precision(values, shape)
        out[name] = values
    if len(rows) > len(shape.columns):  # companions: NULL stays NULL whatever the precision
        for name in shape.columns:
            companion = valid_of(name)
            if companion in rows:
                out[companion] = rows[companion]
    return out


def _precision(values: Array, shape: Shape) -> Array:
    if shape.precision == "fixed":
        return _fixed(values, shape.quantum)
    if shape.quantum:
        values = np.rint(values.astype(np.float64) / shape.quantum) * shape.quantum
    return values.astype(np.float32) if shape.precision == "float32" else values


def _fixed(values: Array, quantum: float) -> Array:
    """Counts of ``quantum``, rounded to nearest; saturating; NaN as ``FIXED_NAN``."""
    scaled = np.rint(values.astype(np.float64) / quantum)
    nan = np.isnan(scaled)
    out = np.clip(np.nan_to_num(scaled, nan=0.0), _FIXED_MIN, _FIXED_MAX).astype(np.int64)
    out[nan] = Transform.FIXED_NAN
    return cast(Array, out)
