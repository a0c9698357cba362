"""Cutting the pushes of many box views from one active buffer at once (why: docs/architecture.md,
"Inside the relay").

:func:`cut_boxes` does :func:`pushes.cut`'s steps for a whole round together, as one pass over
all views' rows laid end to end; only each push's ``Body`` is built per push. Rules:

1. The bodies are byte-identical to ``cut``'s (a property test checks it), so they share
   ``Encodings`` like any other.
2. Finding and comparing rows runs in ``cutkernel`` when built and the keys are integers, else in
   ``compare_numpy``: both give the same ``Turn``. Encoding is one pass too
   (``pushes.encode_runs``, ``packkernel``).
3. Only boxes without coordinates relative to an entity (:func:`batchable`); the rest go
   through ``cut``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.relay.core.transforms import Shape, apply
from fanout.relay.data.buffers import BEFORE_EPOCH, Array, DoubleBuffer, Positions, Table
from fanout.relay.data.nulls import has_companions, with_companions
from fanout.relay.data.pushes import NO_ROWS, Body, Held, both_members, encode_rows, encode_runs
from fanout.relay.data.spatial import GridIndex
from fanout.relay.kernels.compiled import cutkernel
from fanout.views.region import Box

Bounds = npt.NDArray[np.int64]


def batchable(region: object, shape: Shape) -> bool:
    """Whether ``cut_boxes`` can cut this subscription's push."""
    return isinstance(region, Box) and (shape.relative_to is None or not shape.relative)


def cut_boxes(
    boxes: Sequence[Box], helds: Sequence[Held | None], shape: Shape, buffer: DoubleBuffer
) -> list[Body]:
    """The bodies ``cut(boxes[i], shape, helds[i], buffer)`` would give, for every ``i``.

    Args:
        boxes: the views, boxes of the buffer's index dimension.
        helds: what each subscriber holds (None: nothing yet, a first push).
        shape: the transform, one for all (with no ``relative_to``: see ``batchable``).
        buffer: the double buffer whose active table is cut.
    """
    table = buffer.active
    split = compare_compiled if compiled(table, buffer.index, len(boxes)) else compare_numpy
    turn = split(boxes, helds, table, buffer.index)
    keys = turn.columns[table.key].take(turn.rows)
    entered = _section(turn, turn.entered, turn.entered_at, shape)
    updated = _section(turn, turn.updated, turn.updated_at, shape)
    gone = {table.key: turn.gone}
    left = encode_runs(gone, None, turn.gone_at, encode_rows({table.key: turn.gone[:0]}))
    at = turn.rows_at.tolist()
    changes = (np.diff(turn.entered_at) + np.diff(turn.updated_at) + np.diff(turn.gone_at)).tolist()
    return [
        Body(
            keys=keys[at[number] : at[number + 1]],
            anchor=None,
            full=held is None,
            changes=changes[number],
            entered=entered[number],
            updated=updated[number],
            left=left[number],
        )
        for number, held in enumerate(helds)
    ]


def _section(turn: Turn, positions: Positions, bounds: Bounds, shape: Shape) -> list[msgspec.Raw]:
    """The encoded rows of one section of every push of the turn (entered or updated): run
    ``i`` is the rows at ``positions[bounds[i]:bounds[i + 1]]``, transformed by ``shape``.

    Rows that go out as stored are gathered as they are packed; others are transformed first,
    the whole section at once.
    """
    if shape.identity:
        names = with_companions(shape.columns, turn.columns) if turn.nullable else shape.columns
        columns = {name: turn.columns[name] for name in names}
        return encode_runs(columns, positions, bounds, NO_ROWS)
    rows = apply(turn.take(positions, shape.columns), shape, None)
    return encode_runs(rows, None, bounds, NO_ROWS)


class Turn(NamedTuple):
    """A turn's boxes against what their subscribers hold; run ``i`` of each array is
    ``array[array_at[i]:array_at[i + 1]]``.

    Attributes:
        rows: each box's rows, in key order (positions in ``columns``).
        entered: those its subscriber does not hold.
        updated: those it holds, changed since what it holds.
        gone: held keys no longer in the box.
        columns: the columns the positions index: the active table's, or the grid's copy of
            them in cell order (``GridIndex.carried``).
    """

    rows: Positions
    rows_at: Bounds
    entered: Positions
    entered_at: Bounds
    updated: Positions
    updated_at: Bounds
    gone: Array
    gone_at: Bounds
    columns: Mapping[str, Array]

    def take(self, positions: Positions, names: Sequence[str] | None) -> dict[str, Array]:
        """The rows at ``positions``, column by column (only ``names`` if given, with their
        companions: ``relay.data.nulls``)."""
        if not names:
            return {name: values.take(positions) for name, values in self.columns.items()}
        chosen = with_companions(names, self.columns) if self.nullable else names
        return {name: self.columns[name].take(positions) for name in chosen}

    @property
    def nullable(self) -> bool:
        """Whether some column has a companion (``relay.data.nulls``)."""
        return has_companions(self.columns)


def compiled(table: Table, index: GridIndex, count: int) -> bool:
    """Whether ``compare_compiled`` applies to ``count`` boxes: the kernel is built, the keys
    are integers, the grid carries the table in cell order (``DoubleBuffer`` builds it so then)
    and the boxes and rows fit the kernel's sort codes (two positions and a box in 63 bits)."""
    bits = max(1, (index.rows - 1).bit_length())
    return (
        cutkernel is not None
        and table.keys.dtype == np.int64
        and len(index.binned) in (2, 3)
        and index.rows > 0
        and index.carried_changed is not None
        and (count + 1).bit_length() + 2 * bits <= 63
    )


def compare_compiled(
    boxes: Sequence[Box], helds: Sequence[Held | None], table: Table, index: GridIndex
) -> Turn:
    """``compare_numpy``'s answer from the compiled kernel (``cutkernel.cut_turn``)."""
    assert cutkernel is not None and index.carried_changed is not None
    shape = len(boxes), len(index.binned)
    lo = np.array([box.lo for box in boxes], dtype=np.float64).reshape(shape)
    hi = np.array([box.hi for box in boxes], dtype=np.float64).reshape(shape)
    held_keys, lengths = _held_keys(table, helds)
    held_at = np.zeros(len(helds) + 1, dtype=np.int64)
    np.cumsum(lengths, out=held_at[1:])
    since = np.array([_since(h) for h in helds], dtype=np.int64)
    return Turn(
        *cutkernel.cut_turn(
            lo,
            hi,
            index.origin,
            index.top,
            index.side_array,
            index.cells,
            index.offsets,
            index.order,
            index.binned,
            index.carried[table.key],
            index.carried_changed,
            held_keys,
            held_at,
            since,
        ),
        index.carried,
    )


def compare_numpy(
    boxes: Sequence[Box], helds: Sequence[Held | None], table: Table, index: GridIndex
) -> Turn:
    """Each box's rows (``GridIndex.query_many``) against what its subscriber holds."""
    count = len(boxes)
    rows, bounds = index.query_many(boxes)
    counts = np.diff(bounds)
    owner = np.repeat(np.arange(count, dtype=np.int64), counts)
    keys = table.keys.take(rows)
    held_keys, lengths = _held_keys(table, helds)
    held_owner = np.repeat(np.arange(count, dtype=np.int64), lengths)
    present, kept = _compare(
        table, keys=keys, rows=rows, owner=owner, held_keys=held_keys, held_owner=held_owner
    )
    # The rule of ``cut_positions`` with no anchor: every held row is updated after a refresh,
    # or when what is held was cut with an anchor (changed after a seq before every row's);
    # else the rows changed since the held seq.
    since = np.array([_since(h) for h in helds], dtype=np.int64)
    changed = present & (table.changed.take(rows) > np.repeat(since, counts))
    return Turn(
        rows,
        bounds,
        rows[~present],
        _bounds(owner[~present], count),
        rows[changed],
        _bounds(owner[changed], count),
        held_keys[~kept],
        _bounds(held_owner[~kept], count),
        table.columns,
    )


def _since(held: Held | None) -> int:
    """The seq after which a held row counts as updated (before every row's: all of them)."""
    if held is None:
        return BEFORE_EPOCH  # nothing held, nothing present
    return BEFORE_EPOCH - 1 if held.refresh or held.anchor is not None else held.seq


def _compare(
    table: Table,
    *,
    keys: Array,
    rows: Positions,
    owner: npt.NDArray[np.int64],
    held_keys: Array,
    held_owner: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which rows each subscriber held already, and which held keys are still in its view.

    Both sides are coded (subscriber, key) — integer keys offset by the smallest, else the
    key's position in the active table — and sorted, so one ``searchsorted`` answers both for
    every subscriber. Integer codes need no lookup in the (large) table.
    """
    if keys.dtype.kind == "i" and len(keys) and len(held_keys):
        low = min(int(keys.min()), int(held_keys.min()))
        span = max(int(keys.max()), int(held_keys.max())) - low + 1
        if (max(int(owner[-1]), int(held_owner[-1])) + 1) * span < 1 << 62:  # codes fit
            codes = owner * span + (keys.astype(np.int64, copy=False) - low)
            held_codes = held_owner * span + (held_keys.astype(np.int64, copy=False) - low)
            return both_members(codes, held_codes)
    at = table.locate(held_keys)
    found = at >= 0
    stride = len(table) + 1
    held_codes = held_owner[found] * stride + at[found]
    codes = owner * stride + rows
    present, kept_found = both_members(codes, held_codes)
    kept = np.zeros(len(held_keys), dtype=bool)
    kept[found] = kept_found
    return present, kept


def _held_keys(table: Table, helds: Sequence[Held | None]) -> tuple[Array, list[int]]:
    """Every held key, subscriber after subscriber, and how many each subscriber holds."""
    parts = [h.keys for h in helds if h is not None]
    lengths = [0 if h is None else len(h.keys) for h in helds]
    keys = table.as_keys(np.concatenate(parts)) if parts else table.keys[:0]
    return keys, lengths


def _bounds(owner: npt.NDArray[np.int64], count: int) -> Bounds:
    """Offsets of each subscriber's run in an array grouped by subscriber (``owner`` sorted)."""
    bounds = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=count), out=bounds[1:])
    return bounds
