"""The relay's live path: a ``Publish`` forwarded upstream (or on a link of its own, MQTT's:
``ours``) is shown at once to the ``latest`` subscriptions it concerns, their pushes reconciled
until the publisher's stream settles it (``relay.core.provisional``; docs/concepts.md).

It turns frames and pushes into the pure core's rows, and its patches into push frames:
1. A write is shown only if it is whole rows of the dataset's column types, keys unique, that
   its kind's lens admits (objects' quality rules); else counted ``invalid`` (confirmed path
   alone). One made elsewhere, durable (``Written``): shown as ours accepted at its offset unless
   the active state carries it; one a worker's leader passes unanswered (``Pending``): as ours.
2. A subscription watches from a full push if ``latest``, not ``confirmed``, not transduced, of
   a kind with a lens; its pushes meanwhile are reconciled (provisional if a row is pending).
3. Provisional pushes and corrections carry the active state's epoch, seq and tick.
4. A durable write of ``durable_datasets`` goes to ``durable`` at once (ours once logged) for
   MQTT clients (``mqtt.fromlog``), who cannot be told a write was undone; asked for while
   ``durable_wanted`` says a client could take one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence, Set
from typing import Any, NamedTuple, cast

import msgspec
import numpy as np

from fanout.errors import FanoutError
from fanout.relay.core.downstream import SubKey, Subscription
from fanout.relay.core.provisional import LiveWrites, Patch, Row
from fanout.relay.core.sends import Send
from fanout.relay.data.buffers import Stamp
from fanout.relay.data.intake import decode_rows
from fanout.relay.data.nulls import is_companion, split
from fanout.relay.data.pushes import Body, PushFrame, encode_rows
from fanout.relay.kinds.base import Parts
from fanout.relay.kinds.lens import RowLens
from fanout.wire.columns import Columns, decode_columns, key_column
from fanout.wire.messages import Pending, Publish, Settled, Written

_encoder = msgspec.msgpack.Encoder()
_columns = msgspec.msgpack.Decoder(Columns)


class Passed(NamedTuple):
    """A write a worker's leader passed before the publisher answered (``LivePath.pending``)."""

    id: int  # shown under it (``LiveWrites``), if shown
    write: Pending
    deadline: float  # forgotten past it if not settled, and not pending any more


class LivePath:
    """Live writes on one relay: the pure core (``writes``) and the frames it needs."""

    def __init__(self, parts: Parts, writes: LiveWrites | None = None) -> None:
        self.parts = parts
        self.writes = LiveWrites() if writes is None else writes
        self.invalid = 0
        self.passed = 0  # writes made elsewhere shown here
        self.late = 0  # ... not shown to a view watching: the active state carried them already
        #: Whether a subscription is transduced: its transducer steps the confirmed rows alone.
        self.transduced: Callable[[SubKey], bool] = lambda key: False
        self._lenses: dict[SubKey, RowLens] = {}
        # Writes made elsewhere are numbered up from 1: ours by the ``Forwarder``, down from -1.
        self._elsewhere = itertools.count(1)
        #: Who takes the durable writes of ``durable_datasets`` (rule 4), and ours awaiting
        #: answers meanwhile (as many as the ``Forwarder`` lets wait).
        self.durable: Callable[[str, Columns], None] = lambda dataset, upserts: None
        self.durable_datasets: frozenset[str] = frozenset()
        self.durable_wanted: Callable[[], Set[str]] = lambda: self.durable_datasets
        self._asked: dict[int, Publish] = {}
        #: Ours sent on a link of our own (``ours``), pending: the publisher passes them back.
        self._own: dict[tuple[str, bytes, bytes], int] = {}
        #: A worker's: writes its leader passed before the publisher answered (``pending``), by
        #: the leader's reference; as many at most as may be pending.
        self._passed: dict[int, Passed] = {}

    # -- writes and their answers --------------------------------------------------------

    def write(self, request: Publish, upstream: int, now: float) -> list[Send]:
        """``request`` was forwarded upstream as ``upstream``: shown to whom it concerns."""
        self.prune()
        if request.dataset in self.durable_datasets:
            self._asked[upstream] = request  # rule 4, once answered
        kind = self.parts.kinds.get(request.dataset)
        if kind is None or not self._watched(request.dataset):
            return []
        try:
            rows = written(kind.state.buffer.active.dtypes, kind.state.info, request)
            rows = self._admitted(request.dataset, rows)
        except (FanoutError, TypeError, ValueError):
            self.invalid += 1  # rule 1
            return []
        return self._sends(self.writes.write(upstream, request.dataset, rows, now))

    def ours(self, request: Publish, now: float) -> tuple[int, list[Send]]:
        """``request`` made through this relay went upstream on a link of its own (the MQTT
        port's producer link): shown at once as ``write`` shows it, under the number returned
        (answered by ``accepted`` or ``refused``); its copy passed back is not shown again."""
        id = next(self._elsewhere)
        return id, self._shown(id, request, now)

    def _shown(self, id: int, request: Publish, now: float) -> list[Send]:
        """``request`` shown at once under ``id``; its copy passed back is known as it."""
        kind = self.parts.kinds.get(request.dataset)
        if kind is None or not self._watched(request.dataset):
            return []
        try:
            rows = written(kind.state.buffer.active.dtypes, kind.state.info, request)
            rows = self._admitted(request.dataset, rows)
        except (FanoutError, TypeError, ValueError):
            self.invalid += 1  # rule 1
            return []
        self._own[_signature(request.dataset, request.upserts, request.deletes)] = id
        return self._sends(self.writes.write(id, request.dataset, rows, now))

    def pending(self, frame: Pending, now: float) -> list[Send]:
        """A worker's leader passed a write made through another worker, not answered yet:
        shown at once as ``ours`` shows it, until ``settled``; at most as many wait as may be
        pending (past that, and once its deadline passed unsettled, it takes the confirmed
        path alone)."""
        self.prune()
        self._forget_unsettled(now)
        if len(self._passed) >= self.writes.limit:
            self.writes.counters.skipped += 1
            return []
        id = next(self._elsewhere)
        self._passed[frame.ref] = Passed(id, frame, now + self.writes.within)
        request = Publish(0, frame.dataset, frame.upserts, frame.deletes)
        sends = self._shown(id, request, now)
        self.passed += id in self.writes
        return sends

    def settled(self, frame: Settled) -> tuple[list[Send], Written | None]:
        """The publisher answered the write ``pending`` showed: confirmed by the first state
        with ``tick >= last`` if it logged it, else undone. Returns what to send, and the write
        as logged (``Written``, for the relays below; None: refused, or not known here)."""
        passed = self._passed.pop(frame.ref, None)
        if passed is None:
            return [], None
        id, write, _ = passed
        if frame.last is None:
            return self.refused(id), None
        first = frame.last if frame.first is None else frame.first
        written = Written(write.dataset, first, frame.last, write.upserts, write.deletes)
        if write.dataset in self.durable_datasets and not self._carried(write.dataset, frame.last):
            self.durable(write.dataset, write.upserts)  # rule 4
        return self._sends(self.writes.accepted(id, frame.last)), written

    def _forget_unsettled(self, now: float) -> None:
        """Forget the passed writes unsettled past their deadline that are not pending (withdrawn
        there, or never shown): their answer, should it come, has nothing left to settle."""
        if self._passed:
            self._passed = {
                ref: passed
                for ref, passed in self._passed.items()
                if passed.deadline > now or passed.id in self.writes
            }

    def from_elsewhere(self, frame: Written, now: float) -> list[Send]:
        """A write made through another relay or a producer, logged up to ``frame.last``: shown
        to whom it concerns here, confirmed by this relay's first state with ``tick >= last``."""
        self.prune()
        own = self._own.pop(_signature(frame.dataset, frame.upserts, frame.deletes), None)
        if own is not None:  # ours (``ours``), shown already: its MQTT clients got it too
            return self._sends(self.writes.accepted(own, frame.last))
        if self._carried(frame.dataset, frame.last):
            self.late += self._watched(frame.dataset)  # the confirmed path was faster
            return []
        if frame.dataset in self.durable_datasets:
            self.durable(frame.dataset, frame.upserts)  # rule 4
        kind = self.parts.kinds.get(frame.dataset)
        if kind is None or not self._watched(frame.dataset):
            return []
        request = Publish(0, frame.dataset, frame.upserts, frame.deletes)
        try:
            rows = written(kind.state.buffer.active.dtypes, kind.state.info, request)
            rows = self._admitted(frame.dataset, rows)  # over the rows held here (objects')
        except (FanoutError, TypeError, ValueError):
            self.invalid += 1  # the publisher logged it: what we hold differs, the batch decides
            return []
        self.passed += 1
        id = next(self._elsewhere)
        patches = self.writes.write(id, frame.dataset, rows, now)
        return self._sends([*patches, *self.writes.accepted(id, frame.last)])

    def accepted(self, upstream: int, last: int) -> list[Send]:
        """The publisher logged write ``upstream`` up to ingest offset ``last``."""
        request = self._asked.pop(upstream, None)
        if request is not None and not self._carried(request.dataset, last):
            self.durable(request.dataset, request.upserts)  # rule 4
        return self._sends(self.writes.accepted(upstream, last))

    def refused(self, upstream: int) -> list[Send]:
        """The publisher refused write ``upstream`` (or ``ours``: it may not have logged it)."""
        self._asked.pop(upstream, None)
        if upstream > 0:
            self._own = {sign: id for sign, id in self._own.items() if id != upstream}
        return self._sends(self.writes.refused(upstream))

    def swapped(self, dataset: str, stamp: Stamp | None) -> list[Send]:
        """A new state of ``dataset`` is active."""
        if stamp is None:
            return []
        sends = self._sends(self.writes.swapped(dataset, stamp.tick))
        if self._own:  # settled without their copy passed back (not passed: a full queue)
            self._own = {sign: id for sign, id in self._own.items() if id in self.writes}
        return sends

    def expire(self, now: float) -> list[Send]:
        """Withdraw the writes past their deadline; forget ended subscriptions."""
        self.prune()
        sends = self._sends(self.writes.expire(now))
        self._forget_unsettled(now)
        return sends

    def lost(self) -> list[Send]:
        """The upstream link is gone: the writes it had not answered are withdrawn; the
        accepted ones wait, their deadlines stopped, for the stream to carry them."""
        self._asked.clear()  # answered ``unavailable``: they may or may not be logged
        sends = self._sends(self.writes.away())  # the passed ones too: none was accepted
        if self._passed:  # their settling would come on the lost link
            gone = {passed.id for passed in self._passed.values()}
            self._own = {sign: id for sign, id in self._own.items() if id not in gone}
            self._passed.clear()
        return sends

    def back(self) -> None:
        """A new upstream link: deadlines run again from each dataset's first state over it."""
        self.writes.back()

    def stats(self) -> dict[str, float]:
        """What the live path did (``/metrics``: ``relay_live_*``)."""
        counters = self.writes.counters
        return {
            "live_writes": counters.writes,
            "live_invalid": self.invalid,
            "live_passed": self.passed,
            "live_late": self.late,
            "live_skipped": counters.skipped,
            "live_pending": len(self.writes),
            "live_unsettled": len(self._passed),
            "live_shown": counters.shown,
            "live_confirmed": counters.confirmed,
            "live_refused": counters.refused,
            "live_withdrawn": counters.withdrawn,
            "live_corrected": counters.corrected,
            "live_deduplicated": counters.deduplicated,
        }

    # -- subscriptions ---------------------------------------------------------------------

    def forget(self, key: SubKey) -> None:
        """Subscription ``key`` ended."""
        self._lenses.pop(key, None)
        self.writes.forget(key)

    def prune(self) -> None:
        """Forget the subscriptions that ended (however they did)."""
        downstream = self.parts.downstream
        for key, lens in list(self._lenses.items()):
            if downstream.get(key) is not lens.subscription:
                self.forget(key)

    def deliver(self, subscription: Subscription, stamp: Stamp, body: Body) -> bytes | None:
        """The push of ``body`` as ``subscription``'s subscriber must get it, or None: as cut
        (rule 2). Whether it watches is decided at its full pushes (one dict look-up on the
        others), and when it changes to ``confirmed`` (``changed``)."""
        key = subscription.key
        lens = self._lenses.get(key)
        if body.full:
            self.forget(key)
            lens = self._lens(subscription)
            if lens is None:
                return None
            self._lenses[key] = lens
            self.writes.watch(key, subscription.dataset, lens)
        elif lens is None:
            return None
        if not self.writes.watching(key):
            return None
        name = self.parts.kinds[subscription.dataset].state.info.key
        dtypes = lens.dtypes()
        cut = Patch(
            key,
            _rows(body.entered, name, dtypes),
            _rows(body.updated, name, dtypes),
            _keys(body.left, name),
        )
        patch = self.writes.reconcile(cut, body.full)
        if patch == cut:  # nothing to change: the shared encoding goes
            return None
        return encode_patch(patch, stamp, lens, body.full)

    def changed(self, subscription: Subscription) -> list[Send]:
        """``subscription`` was changed: if it asks confirmed rows only now, it is shown no new
        write and what it was shown is brought back to the confirmed rows at once (one changed
        back to live writes takes them from its next full push)."""
        key = subscription.key
        if key not in self._lenses or self._lens(subscription) is not None:
            return []
        sends = self._sends(self.writes.retire(key))
        if not self.writes.watching(key):
            self.forget(key)
        return sends

    def _admitted(self, dataset: str, rows: Mapping[Hashable, Row]) -> dict[Hashable, Row]:
        """The rows as the publisher admits them (a lens of the dataset says: rule 1)."""
        lens = next(lens for lens in self._lenses.values() if lens.subscription.dataset == dataset)
        return lens.admitted(rows, self.writes.newest(dataset))

    def wanted(self, key: SubKey | None = None) -> set[str]:
        """The datasets a subscription here takes live writes of (``LiveWrites``), and those
        ``durable`` may take now (rule 4), or only subscription ``key``'s if it does (at once,
        before its first full push)."""
        downstream = self.parts.downstream
        if key is not None:
            one = downstream.get(key)
            return set() if one is None or self._lens(one) is None else {one.dataset}
        return set(self.durable_wanted() & self.durable_datasets & self.parts.kinds.keys()) | {
            name
            for name in self.parts.kinds
            if any(self._lens(s) is not None for s in downstream.of_dataset(name))
        }

    def _carried(self, dataset: str, last: int) -> bool:
        """Whether the active state of ``dataset`` carries the writes logged up to ``last``."""
        kind = self.parts.kinds.get(dataset)
        stamp = None if kind is None else kind.state.buffer.stamp
        return stamp is not None and stamp.tick >= last

    def _watched(self, dataset: str) -> bool:
        return any(lens.subscription.dataset == dataset for lens in self._lenses.values())

    def _lens(self, subscription: Subscription) -> RowLens | None:
        """Its lens, if it takes live writes: ``latest``, not ``confirmed``, not transduced, of a
        kind that has lenses."""
        if (
            subscription.mode != "latest"
            or subscription.asked.confirmed
            or self.transduced(subscription.key)
        ):
            return None
        kind = self.parts.kinds.get(subscription.dataset)
        return None if kind is None else kind.lens(subscription)

    def _sends(self, patches: Sequence[Patch]) -> list[Send]:
        sends = []
        for patch in patches:
            client, sub = cast(SubKey, patch.sub)
            lens = self._lenses.get((client, sub))
            stamp = None if lens is None else lens.buffer.stamp
            if lens is not None and stamp is not None:
                sends.append(Send(client, encode_patch(patch, stamp, lens, False)))
        return sends


def written(
    dtypes: Mapping[str, np.dtype[Any]], info: Any, request: Publish
) -> dict[Hashable, Mapping[str, object] | None]:
    """A write's rows by key (None: deleted), checked as rule 1 says.

    Raises:
        FanoutError, TypeError, ValueError: not whole rows of the dataset's types.
    """
    rows = decode_rows(info, request.upserts, f"write {request.req}")
    arrays = {name: np.asarray(values, dtype=dtypes[name]) for name, values in rows.items()}
    deletes = np.asarray(key_column(request.deletes, info.key, "deletes"), dtype=dtypes[info.key])
    out: dict[Hashable, Mapping[str, object] | None] = dict.fromkeys(deletes.tolist())
    if arrays:
        names = list(arrays)
        for values in zip(*(arrays[name].tolist() for name in names), strict=True):
            row = dict(zip(names, values, strict=True))
            if row[info.key] in out:
                raise ValueError(f"key {row[info.key]!r} twice in one write")
            out[row[info.key]] = row
    return out


def _signature(dataset: str, upserts: Columns, deletes: Columns) -> tuple[str, bytes, bytes]:
    """A write as the publisher passes it back, to know it by."""
    return dataset, _encoder.encode(upserts), _encoder.encode(deletes)


def _rows(raw: msgspec.Raw, key: str, names: Iterable[str]) -> dict[Hashable, Mapping[str, object]]:
    """A push's rows by key, each with every column of ``names``: a nullable column's
    companion, which the wire leaves out when nothing is NULL, is then all true."""
    arrays = split(decode_columns(_columns.decode(raw)))
    if not arrays:
        return {}
    length = len(arrays[key])
    for name in names:
        if is_companion(name) and name not in arrays:
            arrays[name] = np.ones(length, dtype=bool)
    names = list(arrays)
    rows = (
        dict(zip(names, v, strict=True))
        for v in zip(*(arrays[n].tolist() for n in names), strict=True)
    )
    return {row[key]: row for row in rows}


def _keys(raw: msgspec.Raw, key: str) -> list[Hashable]:
    arrays = decode_columns(_columns.decode(raw))
    return arrays[key].tolist() if arrays else []


def encode_patch(patch: Patch, stamp: Stamp, lens: RowLens, full: bool) -> bytes:
    """The push frame of ``patch`` (rule 3)."""
    dtypes = lens.dtypes()
    key = lens.buffer.active.key

    def section(rows: Mapping[Hashable, Mapping[str, object]]) -> msgspec.Raw:
        if not rows:
            return encode_rows({})
        values = list(rows.values())
        return encode_rows(
            {name: np.asarray([row[name] for row in values], dtype=dtypes[name]) for name in dtypes}
        )

    left = np.asarray(patch.left, dtype=lens.buffer.active.dtypes[key])
    frame = PushFrame(
        cast(SubKey, patch.sub)[1],
        stamp.epoch,
        stamp.seq,
        stamp.tick,
        stamp.tick_time,
        full,
        section(patch.entered),
        section(patch.updated),
        encode_rows({key: left}) if len(left) else encode_rows({}),
        patch.provisional,
    )
    return _encoder.encode(frame)
