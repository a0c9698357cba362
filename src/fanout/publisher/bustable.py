"""The database connector's side of the subject bus, without I/O (Liebig et al., §3, §4.1):
what to publish for a micro-batch, a ``LOAD``, a ``QUERY`` (the reference: docs/caches.md). Rules:

1. **One table per type** (a dataset with ``bus``): key -> (version, row) of its live objects.
2. **Changes in commit order**, in version order: ``CREATE``, ``UPDATENOTIFY`` or ``DELETE``
   under the object's subject; an object whose label changed also under its old subject.
3. **Loads from the table**: the current version, or a ``LOADREPLY`` without state, version 0.
4. **Queries** publish a ``LOADREPLY`` for every live object the label pattern selects.
5. **Fragments** of at most ``fragment_bytes``, under one subject, request id and version.
6. **Writes at once** (``written``): a durable write or a commit (``sources.postgres_tail``),
   under the versions its micro-batch will carry, which never takes the table back past it and
   repeats it for a cache that missed it (docs/caches.md, "Writes at once").
7. **The batch decides**: a key written at once that a micro-batch passed without carrying it
   is corrected to its confirmed row (or deleted) under the batch's newest version.
Called from one thread, so one object's messages are in version order on the bus.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from fanout.publisher.datasets import Dataset, PostgresSource
from fanout.wire.bus import (
    FRAGMENT_BYTES,
    ObjectKind,
    ObjectMessage,
    Row,
    TypeInfo,
    encode_row,
    fragments,
    key_from_token,
    label_tokens,
    object_subject,
    pattern_tokens,
    tokens_match,
)

Outgoing = tuple[str, ObjectMessage]


@dataclass(frozen=True)
class ObjectType:
    """A dataset as a type of objects on the bus.

    Attributes:
        name: the type's name (the dataset's).
        info: what caches are told about it (``TYPES``).
    """

    name: str
    info: TypeInfo


@dataclass
class _Live:
    version: int
    row: Row


@dataclass
class _Floor:
    """The newest version of a key published when written, and whether it existed then under
    which label (rule 6)."""

    version: int
    existed: bool
    label: str | None
    #: The key's row as the micro-batches last left it (None: not live): what a write the
    #: batch never carries is corrected back to (rule 7).
    confirmed: _Live | None


class ObjectTable:
    """One type's live objects and what to publish about them (rules 1-5).

    Attributes:
        loaded: whether it holds the type's objects as of the last micro-batch (after a restart,
            the pipeline loads the state once before the first micro-batch it publishes).
        ready: whether it answers loads and queries: once it was loaded, or a micro-batch with
            rows came, or the stream went idle after its first micro-batch (``mark_ready``).
            Before, "not there" could be a lie: a new stream's first micro-batch may come
            empty, the table's rows in the next one.
    """

    def __init__(self, kind: ObjectType, domain: str, fragment_bytes: int = FRAGMENT_BYTES) -> None:
        self.kind = kind
        self.domain = domain
        self.fragment_bytes = fragment_bytes
        self.loaded = False
        self.ready = False
        self._live: dict[int | str, _Live] = {}
        self._floors: dict[int | str, _Floor] = {}  # keys written, not carried by a batch yet
        self._batched = 0  # the newest version a micro-batch carried (ingest: every older one)
        self.corrected = 0  # keys written at once that a micro-batch corrected (rule 7)

    def __len__(self) -> int:
        return len(self._live)

    def load(self, rows: Iterable[Row], versions: Iterable[int]) -> None:
        """Hold ``rows`` (every live object, with its version) and nothing else."""
        key = self.kind.info.key
        self._live = {_key(row[key]): _Live(v, row) for row, v in zip(rows, versions, strict=True)}
        self.loaded = True

    def changes(
        self, rows: list[Row], versions: list[int], deleted: list[bool], request: str, now: float
    ) -> list[Outgoing]:
        """Apply a micro-batch's changed rows and say what to publish (rule 2).

        Args:
            rows: the changed rows (the dataset's columns), one per key.
            versions: each row's version.
            deleted: whether each row is a tombstone.
            request: the micro-batch's request id.
            now: the connector's wall clock.
        """
        self.loaded = True
        self.ready = self.ready or bool(rows)
        self._batched = max([self._batched, *versions])
        out = self._apply(rows, versions, deleted, request, now, live=False)
        return out + self._corrections(request, now)

    def _corrections(self, request: str, now: float) -> list[Outgoing]:
        """Correct every key written at once whose write the micro-batches passed without
        carrying it (rule 7): back to its confirmed row, under the newest version batched."""
        passed = [ref for ref, floor in self._floors.items() if floor.version < self._batched]
        out: list[Outgoing] = []
        for ref in passed:
            confirmed = self._floors.pop(ref).confirmed
            shown = self._live.get(ref)
            shown_label = self._label(shown.row) if shown is not None else None
            self.corrected += 1
            if confirmed is None:
                if shown is not None:
                    del self._live[ref]
                    out += self._messages(
                        "DELETE", ref, shown_label, self._batched, None, request, now
                    )
                continue
            row, label = confirmed.row, self._label(confirmed.row)
            self._live[ref] = _Live(self._batched, row)
            kind: ObjectKind = "CREATE" if shown is None else "UPDATENOTIFY"
            out += self._messages(kind, ref, label, self._batched, row, request, now)
            if shown is not None and shown_label != label:
                out += self._messages(kind, ref, shown_label, self._batched, row, request, now)
        return out

    def written(
        self, rows: list[Row], versions: list[int], deleted: list[bool], request: str, now: float
    ) -> list[Outgoing]:
        """Apply a durable write's rows at once and say what to publish (rule 6): as
        ``changes``, once the table holds the type's objects (before, the micro-batch does)."""
        if not self.loaded:
            return []
        later = [at for at, version in enumerate(versions) if version > self._batched]
        if len(later) < len(versions):  # a micro-batch carried the rest first (a slow thread)
            rows, deleted = [rows[at] for at in later], [deleted[at] for at in later]
            versions = [versions[at] for at in later]
        return self._apply(rows, versions, deleted, request, now, live=True)

    def _apply(  # noqa: PLR0917  # changes' arguments, and which path they came by
        self,
        rows: list[Row],
        versions: list[int],
        deleted: list[bool],
        request: str,
        now: float,
        live: bool,
    ) -> list[Outgoing]:
        key, out = self.kind.info.key, []
        for at in sorted(range(len(rows)), key=versions.__getitem__):
            row, version = rows[at], versions[at]
            ref = _key(row[key])
            floor = self._floors.get(ref)
            if floor is not None and version < floor.version:
                if not live:  # a newer write was published already: not older than it
                    confirmed = None if deleted[at] else _Live(version, row)
                    self._floors[ref] = replace(floor, confirmed=confirmed)
                continue
            before = self._live.get(ref)
            old_label = self._label(before.row) if before is not None else None
            if live:
                confirmed = floor.confirmed if floor is not None else before
                if before is None and floor is not None:  # what a missed delete is sent under
                    self._floors[ref] = _Floor(version, floor.existed, floor.label, confirmed)
                else:
                    self._floors[ref] = _Floor(version, before is not None, old_label, confirmed)
            elif floor is not None:
                del self._floors[ref]
                if version == floor.version and deleted[at] and before is None and floor.existed:
                    # Deleted when written: again, for a cache that missed it (a repeat to others).
                    out += self._messages("DELETE", ref, floor.label, version, None, request, now)
                    continue
            if deleted[at]:
                if before is None:
                    continue  # nothing live to delete (a re-run of the micro-batch)
                del self._live[ref]
                out += self._messages("DELETE", ref, old_label, version, None, request, now)
                continue
            self._live[ref] = _Live(version, row)
            label = self._label(row)
            kind: ObjectKind = "CREATE" if before is None else "UPDATENOTIFY"
            out += self._messages(kind, ref, label, version, row, request, now)
            if before is not None and old_label != label:
                out += self._messages(kind, ref, old_label, version, row, request, now)
        return out

    def mark_ready(self) -> None:
        """The stream is idle after a micro-batch: the table holds everything there is."""
        self.ready = self.loaded

    def load_reply(self, key_spelled: str, request: str, now: float) -> list[Outgoing]:
        """What answers a ``LOAD`` of the key spelled ``key_spelled`` (rule 3).

        Raises:
            InvalidSubject: the token spells no key of this type.
        """
        ref = key_from_token(key_spelled, self.kind.info.integer_key)
        live = self._live.get(ref)
        if live is None:
            return self._messages("LOADREPLY", ref, None, 0, None, request, now)
        label = self._label(live.row)
        return self._messages("LOADREPLY", ref, label, live.version, live.row, request, now)

    def query(self, pattern: str, request: str, now: float) -> tuple[list[Outgoing], int]:
        """What answers a ``QUERY`` (rule 4): the messages, and how many objects they carry.

        Raises:
            InvalidLabel: ``pattern`` is not a label pattern.
        """
        wanted = pattern_tokens(pattern)
        out: list[Outgoing] = []
        count = 0
        for ref, live in self._live.items():
            label = self._label(live.row)
            if tokens_match(wanted, label_tokens(label)):
                count += 1
                out += self._messages("LOADREPLY", ref, label, live.version, live.row, request, now)
        return out, count

    def _label(self, row: Row) -> str | None:
        column = self.kind.info.label
        value = row.get(column) if column is not None else None
        return None if value is None else str(value)

    def _messages(  # noqa: PLR0917  # one message's every field, always all given
        self,
        kind: ObjectKind,
        ref: int | str,
        label: str | None,
        version: int,
        row: Row | None,
        request: str,
        now: float,
    ) -> list[Outgoing]:
        subject = object_subject(kind, self.kind.name, ref, self.domain, label)
        if row is None:
            return [(subject, ObjectMessage(request, version, False, 0, 1, b"", now))]
        pieces = fragments(encode_row(row), self.fragment_bytes)
        return [
            (subject, ObjectMessage(request, version, True, part, len(pieces), piece, now))
            for part, piece in enumerate(pieces)
        ]


def object_type(dataset: Dataset) -> ObjectType:
    """A dataset that opted in with ``bus`` as a type of objects."""
    assert dataset.bus is not None
    source = dataset.source
    table = (source.table or dataset.name) if isinstance(source, PostgresSource) else None
    info = TypeInfo(
        key=dataset.key,
        integer_key=dataset.schema[dataset.key] in ("long", "int"),
        label=dataset.bus.label,
        columns=dict(dataset.schema),
        table=table,
    )
    return ObjectType(dataset.name, info)


def _key(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"a key is an integer or a string, not {value!r}")
    return value
