"""Cutting a subscription's push from the active buffer (CA 3197003 [0089]-[0093], [0139]).

A push is a delta against what the subscriber holds (:class:`Held`): rows that **entered** the
view, rows **updated** since the held seq (every held row when relative coordinates moved or
the epoch changed), keys that **left**; the first push is the whole view, ``full``.

**Shared encodings.** Subscriptions with equal (view, shape, held view, held generation, held
seq) get byte-identical bodies: :class:`Encodings` keeps the bodies cut from each dataset's
current state under that key, so the second reuses the first's columns and only its header is
encoded anew (``msgspec.Raw``). It is emptied when the dataset's generation changes.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.relay.core.transforms import EntityNotHeld, Shape, apply
from fanout.relay.data.buffers import Array, DoubleBuffer, Keys, Positions, Stamp, Table
from fanout.relay.data.nulls import has_companions, is_companion, valid_of
from fanout.relay.data.spatial import IndexedRegion
from fanout.relay.kernels.compiled import packkernel
from fanout.views import View
from fanout.wire.columns import (
    NUMERIC_DTYPES,
    STRING,
    VALID,
    Column,
    Columns,
    encode_columns,
    encode_objects,
    validity,
)

Anchor = tuple[float, ...]


class Held(msgspec.Struct, frozen=True, gc=False):
    """What a subscriber holds of one subscription: the result of its last push.

    Attributes:
        view: the view it was cut for.
        generation: the buffer generation it was cut from.
        epoch: the publisher epoch of that state.
        seq: the seq of that state; rows changed after it are "updated" next time.
        keys: the view's keys then, sorted.
        anchor: the reference entity's position then (None without ``relative_to``).
        refresh: every held row counts as updated at the next push (a new epoch).
        stale: held keys whose rows changed after the subscriber got them and were not sent
            yet (their rate tier was not due: ``relay.core.tiering``), sorted; None: none.
        turn: the push's number since the full push (rate tiers are due by it).
    """

    view: View
    generation: int
    epoch: int
    seq: int
    keys: Keys
    anchor: Anchor | None = None
    refresh: bool = False
    stale: Keys | None = None
    turn: int = 0

    def signature(self) -> Hashable:
        """What determines ``keys`` and ``anchor`` (for sharing bodies)."""
        return (self.view, self.generation, self.seq, self.refresh)

    def refreshed(self) -> Held | None:
        """What to hold for every held row to go again at the next push, even from this same
        state: its generation no buffer's, as ``owing_moves``'s (None: the next push must be
        the full view)."""
        generation = self.generation if self.generation < 0 else -1 - self.generation
        return msgspec.structs.replace(self, generation=generation, refresh=True)

    def owing_moves(self, before: Held) -> Held:
        """What a subscriber holds after only the creations and deletions of the push that
        made this (``Body.important``), holding ``before`` until then: these keys, and the
        moves since ``before`` still owed (every held row's, if the anchor moved or ``before``
        was to be refreshed). Its generation is no buffer's (``-1 - generation``), so its next
        push is cut even from this same state."""
        refresh = before.refresh or before.anchor != self.anchor
        return msgspec.structs.replace(
            self, generation=-1 - self.generation, seq=before.seq, refresh=refresh
        )


class Body(msgspec.Struct, frozen=True, gc=False):
    """The part of a push that does not depend on who receives it.

    Attributes:
        keys: the view's keys at this push (what the subscriber holds after it).
        anchor: the reference entity's position at this push.
        full: the first push of the subscription: ``entered`` is the whole view.
        changes: rows entered + updated + keys left (0: a no-update).
        entered, updated, left: the encoded ``Columns`` of each.
        stale: keys changed but held back (``cut_positions``' ``due``); None: none held back.
        updates: the rows in ``updated`` (0: not counted; only a counted push can send its
            creations and deletions ahead of its moves, ``important``).
    """

    keys: Keys
    anchor: Anchor | None
    full: bool
    changes: int
    entered: msgspec.Raw
    updated: msgspec.Raw
    left: msgspec.Raw
    stale: Keys | None = None
    updates: int = 0

    def important(self) -> Body | None:
        """Its creations and deletions alone, its moves left for a later push (None: it has
        none of either, or its moves were not counted)."""
        if not self.updates or self.changes == self.updates or self.full:
            return None
        changes = self.changes - self.updates
        return msgspec.structs.replace(self, changes=changes, updated=NO_ROWS, updates=0)


class PushFrame(msgspec.Struct, tag="push", tag_field="type", frozen=True, omit_defaults=True):
    """``wire.messages.Push`` with its row payloads already encoded (same bytes on the wire)."""

    sub: int
    epoch: int
    seq: int
    tick: int
    tick_time: float
    full: bool
    entered: msgspec.Raw
    updated: msgspec.Raw
    left: msgspec.Raw
    provisional: bool = False


_encoder = msgspec.msgpack.Encoder()
#: Numeric dtypes whose native bytes are their wire form (all of them, on little-endian
#: machines; on others every column takes ``encode_columns``' byte-swapping path).
_WIRE_DTYPES: dict[np.dtype[np.generic], str] = (
    {np.dtype(wire): wire for wire in NUMERIC_DTYPES if np.dtype(wire).kind != "M"}
    if sys.byteorder == "little"
    else {}
)  # (timestamps and dates take ``encode_columns``' path: a buffer cannot hold datetime64)
NO_ROWS = msgspec.Raw(_encoder.encode(encode_columns({})))


def encode_push(sub: int, stamp: Stamp, body: Body) -> bytes:
    """The wire bytes of subscription ``sub``'s push of ``body``, cut at ``stamp``."""
    frame = PushFrame(
        sub,
        stamp.epoch,
        stamp.seq,
        stamp.tick,
        stamp.tick_time,
        body.full,
        body.entered,
        body.updated,
        body.left,
    )
    return _encoder.encode(frame)


def cut(region: IndexedRegion, shape: Shape, held: Held | None, buffer: DoubleBuffer) -> Body:
    """Cut the push of ``region`` for a subscriber holding ``held``, from the active buffer.

    Raises:
        EntityNotHeld: the shape's reference entity is not in the active buffer.
    """
    anchor = locate_anchor(shape, buffer)
    return cut_positions(buffer.query(region), shape, held, buffer, anchor)


def cut_positions(
    positions: Positions,
    shape: Shape,
    held: Held | None,
    buffer: DoubleBuffer,
    anchor: Anchor | None = None,
    *,
    due: npt.NDArray[np.bool_] | None = None,
) -> Body:
    """Cut the push of the active rows at ``positions`` (sorted) for a subscriber holding ``held``.

    The view's rows were found by the caller: a region's through the spatial index (:func:`cut`),
    a topic filter's or an object path's by their keys (``relay.kinds.topic``,
    ``relay.kinds.path``). ``due`` (aligned with ``positions``; None: all) says which held rows
    may be sent as updated now: a changed row not due is held back as ``Body.stale`` and sent
    when due, even if unchanged since (held rows ``Held.stale``); entered rows and left keys go
    at once (``relay.core.tiering``).
    """
    table = buffer.active
    keys = table.keys[positions]
    stale = None
    if held is None:
        entered, updated, left = positions, positions[:0], keys[:0]
    else:
        present, left = compare_keys(held.keys, keys)
        entered = positions[~present]
        if due is None and held.stale is None:
            updated = positions[present]
            if not (held.refresh or held.anchor != anchor):
                updated = updated[table.changed[updated] > held.seq]
        else:
            changed = present.copy()
            if not (held.refresh or held.anchor != anchor):
                changed = present & (table.changed[positions] > held.seq)
            if held.stale is not None:
                changed |= present & members(keys, held.stale)
            sent = changed if due is None else changed & due
            updated = positions[sent]
            stale = keys[changed & ~sent] if due is not None else None
    return Body(
        keys=keys,
        anchor=anchor,
        full=held is None,
        changes=len(entered) + len(updated) + len(left),
        entered=_rows(table, entered, shape, anchor),
        updated=_rows(table, updated, shape, anchor),
        left=encode_rows({table.key: left}),
        stale=stale if stale is not None and len(stale) else None,
        updates=len(updated),
    )


def locate_anchor(shape: Shape, buffer: DoubleBuffer) -> Anchor | None:
    """The reference entity's position in the active buffer (None without ``relative_to``).

    Raises:
        EntityNotHeld: the entity is not in the active buffer.
    """
    if shape.relative_to is None or not shape.relative:
        return None  # no coordinates sent, so none to make relative
    anchor = entity_position(buffer, shape.relative_to, shape.relative)
    if anchor is None:
        raise EntityNotHeld(
            f"entity {shape.relative_to!r} (relative_to) is not in this relay's state at tick"
            f" {buffer.stamp.tick if buffer.stamp else -1}: its coordinates cannot be made"
            " relative; subscribe to a view that contains it"
        )
    return anchor


def entity_position(
    buffer: DoubleBuffer, entity: int | str, columns: Sequence[str]
) -> Anchor | None:
    """The values of ``columns`` in the active row keyed ``entity``, or None if not held."""
    table = buffer.active
    (at,) = table.locate(table.as_keys([entity]))
    if at < 0:
        return None
    return tuple(float(table.column(name)[at]) for name in columns)


def compare_keys(held: Keys, keys: Keys) -> tuple[npt.NDArray[np.bool_], Keys]:
    """For sorted key arrays: which of ``keys`` are in ``held``, and the held keys not in them."""
    if len(held) == len(keys) and bool(np.all(held == keys)):  # the usual case: same rows
        return np.ones(len(keys), dtype=bool), held[:0]
    present, kept = both_members(keys, held)
    return present, held[~kept]


def members(keys: Keys, among: Keys) -> npt.NDArray[np.bool_]:
    """Which of ``keys`` are in the sorted array ``among``."""
    return members_at(keys, among)[0]


def members_at(keys: Keys, among: Keys) -> tuple[npt.NDArray[np.bool_], Positions]:
    """``members(keys, among)``, and where in ``among`` each of ``keys`` is or would go (clipped
    to its last position)."""
    if not len(among):
        return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.intp)
    at = among.searchsorted(keys)
    np.minimum(at, len(among) - 1, out=at)  # past the end: compared with the last, unequal
    return among[at] == keys, at


def both_members(keys: Keys, among: Keys) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """``members(keys, among)`` and ``members(among, keys)`` with one search, for sorted
    arrays of distinct values."""
    present, at = members_at(keys, among)
    back = np.zeros(len(among), dtype=bool)
    back[at.compress(present)] = True
    return present, back


def _rows(table: Table, positions: Positions, shape: Shape, anchor: Anchor | None) -> msgspec.Raw:
    if not len(positions):
        return NO_ROWS
    return encode_rows(apply(table.take(positions, shape.columns), shape, anchor))


def encode_rows(rows: Mapping[str, Array]) -> msgspec.Raw:
    """``encode_columns`` then msgpack, with numeric columns packed directly.

    The relay's arrays are fresh, contiguous and in native byte order, which on little-endian
    machines is the wire's: their bytes go out as they are.
    """
    length = len(next(iter(rows.values()))) if rows else 0
    return encode_range(prepare_rows(rows), 0, length)


Prepared = list[tuple[str, str | None, Array | memoryview]]
"""Columns ready for ``encode_range``: name, wire dtype if the bytes go out as they are, values
(for those, a memoryview of the array: its slices are cheaper than an array's and msgpack takes
their bytes as they are)."""


class _WithValidity(Prepared):
    """Prepared columns some of which are validities (``VALID``), each after its column."""


def prepare_rows(rows: Mapping[str, Array]) -> Prepared:
    """``rows`` with each column's wire dtype looked up once, for encoding many ranges; a
    column's companion (``relay.data.nulls``) right after it, as its validity (``VALID``)."""
    if has_companions(rows):
        return _prepare_nullable(rows)
    prepared: Prepared = []
    for name, values in rows.items():
        wire = _WIRE_DTYPES.get(values.dtype)
        as_is = values if wire is None else np.ascontiguousarray(values).data
        prepared.append((name, wire, as_is))
    return prepared


def _prepare_nullable(rows: Mapping[str, Array]) -> Prepared:
    prepared = _WithValidity()
    for name, values in rows.items():
        if is_companion(name):
            continue
        wire = _WIRE_DTYPES.get(values.dtype)
        as_is = values if wire is None else np.ascontiguousarray(values).data
        prepared.append((name, wire, as_is))
        valid = rows.get(valid_of(name))
        if valid is not None:
            prepared.append((name, VALID, valid))
    return prepared


def encode_range(prepared: Prepared, start: int, stop: int) -> msgspec.Raw:
    """``encode_rows`` of the rows ``start:stop`` of prepared columns."""
    if isinstance(prepared, _WithValidity):
        return _encode_nullable(prepared, start, stop)
    columns: list[Column] = []
    for name, wire, values in prepared:
        if wire is not None:
            columns.append(Column(name, wire, values[start:stop]))  # type: ignore[arg-type]
        else:  # strings, decimals, bytes (with their validity if they hold a NULL)
            columns += encode_objects(name, values[start:stop])  # type: ignore[arg-type]
    return msgspec.Raw(_encoder.encode(Columns(stop - start, columns)))


def _encode_nullable(prepared: Prepared, start: int, stop: int) -> msgspec.Raw:
    """``encode_range`` of columns some of which have a validity: sent only for a range that
    holds a NULL."""
    columns: list[Column] = []
    for name, wire, values in prepared:
        part = values[start:stop]
        if wire is None:
            columns += encode_objects(name, part)  # type: ignore[arg-type]
        elif wire != VALID:
            columns.append(Column(name, wire, part))  # type: ignore[arg-type]
        elif not part.all():  # type: ignore[union-attr]
            if columns[-1].dtype == STRING:  # a string column's nulls are None in its list
                strings = columns[-1].data
                assert isinstance(strings, list)
                for at in np.flatnonzero(np.logical_not(part)).tolist():
                    strings[at] = None
            else:
                columns.append(Column(name, VALID, validity(part)))  # type: ignore[arg-type]
    return msgspec.Raw(_encoder.encode(Columns(stop - start, columns)))


def encode_runs(
    rows: Mapping[str, Array],
    positions: Positions | None,
    bounds: npt.NDArray[np.int64],
    empty: msgspec.Raw,
) -> list[msgspec.Raw]:
    """``encode_rows`` of many runs of rows at once: run ``i`` is the rows at
    ``positions[bounds[i]:bounds[i + 1]]`` (``positions`` None: the rows themselves in that
    range); an empty run is ``empty``.

    With the compiled packer (``packkernel``) and numeric columns the runs are gathered and
    packed in one pass of compiled code; otherwise each is encoded as ``encode_range`` does.
    The bytes are the same.
    """
    names = list(rows)
    packable = all(rows[name].dtype in _WIRE_DTYPES for name in names)
    if packkernel is not None and packable and not has_companions(rows):
        return packkernel.pack_runs(
            [_prefix(name, _WIRE_DTYPES[rows[name].dtype]) for name in names],
            [np.ascontiguousarray(rows[name]) for name in names],
            positions,
            bounds,
            empty,
            msgspec.Raw,
        )
    if positions is not None:
        rows = {name: rows[name].take(positions) for name in names}
    prepared = prepare_rows(rows)
    return [
        encode_range(prepared, start, stop) if stop > start else empty
        for start, stop in pairwise(bounds.tolist())
    ]


@cache
def _prefix(name: str, wire: str) -> bytes:
    """The msgpack of a ``Column`` up to its data: ``Column(name, wire, b"")`` without its
    empty ``bin`` header (``packkernel.pack_runs`` writes each run's after it)."""
    return _encoder.encode(Column(name, wire, b""))[:-2]


@dataclass
class Encodings:
    """Push bodies cut from the current active state of each dataset, shared by key.

    Attributes:
        cut: bodies computed.
        shared: pushes that reused a body another subscription's push had computed.
    """

    cut: int = 0
    shared: int = 0
    _generation: dict[str, int] = field(default_factory=dict)
    _bodies: dict[str, dict[Hashable, Body]] = field(default_factory=dict)

    def get(self, dataset: str, generation: int, key: Hashable) -> Body | None:
        """The body cut for ``key`` from this generation of ``dataset``, if any."""
        if self._generation.get(dataset) != generation:
            self._generation[dataset] = generation
            self._bodies[dataset] = {}
            return None
        body = self._bodies[dataset].get(key)
        if body is not None:
            self.shared += 1
        return body

    def current(self, dataset: str, generation: int) -> dict[Hashable, Body]:
        """The bodies cut from this generation of ``dataset``, by key (for a turn's pushes
        looked up together: the caller counts ``shared``, and puts what it cuts: ``put_all``)."""
        if self._generation.get(dataset) != generation:
            self._generation[dataset] = generation
            self._bodies[dataset] = {}
        return self._bodies[dataset]

    def put(self, dataset: str, key: Hashable, body: Body) -> None:
        """Remember a body cut from the current generation of ``dataset``."""
        self.cut += 1
        self._bodies.setdefault(dataset, {})[key] = body

    def put_all(self, dataset: str, bodies: Mapping[Hashable, Body]) -> None:
        """``put`` each of ``bodies`` (by key): a turn's, at once."""
        self.cut += len(bodies)
        self._bodies.setdefault(dataset, {}).update(bodies)

    def forget(self, dataset: str) -> None:
        """Drop every body of ``dataset`` (its catalog entry changed)."""
        self._generation.pop(dataset, None)
        self._bodies.pop(dataset, None)

    def __len__(self) -> int:
        return sum(len(bodies) for bodies in self._bodies.values())
