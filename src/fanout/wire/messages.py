"""Every frame of the protocol, one union per direction (docs/protocol.md).

Frames are immutable tagged structs; they evolve only by adding fields with defaults, so an older
peer keeps decoding what a newer one sends. Conversations:

* subscriber -> relay: ``Hello``, then ``Subscribe`` / ``Unsubscribe`` at will.
* relay -> subscriber: ``Welcome``, then ``Subscribed``, ``Push``, ``NoUpdate``,
  ``Unsubscribed``, ``Error``.
* relay -> publisher: ``Hello``, then ``Acquire`` / ``Release`` (primitives), ``ReadState``.
* publisher -> relay: ``Welcome`` and ``Catalog``, then one ``Batch`` per micro-batch,
  ``StateRows``, ``Error``; a relay's leader <-> its workers: ``Pending``, ``Settled``,
  ``Responsibility`` down, ``Adopted``, ``MapWanted``, ``WorkerLoad`` up.

A ``reader`` talks to the publisher like a relay, holding no primitives and sent no batches; a
``producer`` sends ``Publish`` to ``ingest`` datasets, answered ``Published`` once durable.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from fanout.views import View
from fanout.wire.columns import Columns
from fanout.wire.options import Relevance, Resume, Transduce
from fanout.wire.options import Transform as Transform  # noqa: PLC0414 (re-exported)

#: Bumped on any change an older peer could misread; peers with another version are refused.
PROTOCOL_VERSION = 1

Role = Literal["subscriber", "relay", "reader", "producer"]


class Frame(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    """Base of every frame; each subclass sets its ``tag``."""


class Hello(Frame, tag="hello", frozen=True):
    """First frame from the connecting side: who it is and which protocol it speaks.

    ``capabilities`` lists what a subscriber can decode: the number formats ``float64``,
    ``float32`` and ``fixed`` (see :class:`Transform`, whose ``negotiate`` turns a requested
    transform into the one the relay applies). Empty means "not declared": every format.
    Unknown names are ignored, so newer subscribers may list more.
    """

    version: int
    role: Role
    name: str = ""
    capabilities: list[str] = []
    #: A reconnecting relay: dataset -> (epoch, last seq it applied). The publisher replays the
    #: batches after that seq from its log before any live batch, so the relay sees no gap.
    resume: dict[str, tuple[int, int]] = {}
    #: A JSON Web Token, where the accepting side requires one (``fanout.auth``): it must
    #: grant this ``role``. Empty: none.
    token: str = ""


class Welcome(Frame, tag="welcome", frozen=True):
    """The accepting side's answer to a compatible ``Hello``.

    ``datasets``: a relay's answer to a subscriber names the datasets it serves, each with the
    kind of its index (``DatasetInfo.index``: ``space``, ``sql``, ``topic``, ``path``), so that
    a subscriber can tell which view language a dataset takes before it subscribes. Empty from
    a relay that does not have the publisher's catalog yet, from relays older than the field,
    and from a publisher (whose ``Catalog`` follows). Kinds are plain strings, not a closed
    set, so that a subscriber still decodes a ``Welcome`` naming a kind newer than itself.
    """

    version: int
    server: str
    session: str
    datasets: dict[str, str] = {}


class Error(Frame, tag="error", frozen=True):
    """Something the peer sent was refused; ``ref`` names the subscription/primitive/request.

    ``location``: with code ``redirect``, the URL of the relay responsible for the refused
    subscription's part (docs/cluster.md); subscribe there instead.
    """

    code: str
    message: str
    ref: int | None = None
    location: str | None = None


Mode = Literal["latest", "every"]


class Subscribe(Frame, tag="subscribe", frozen=True):
    """Hold ``view`` of ``dataset`` under the subscriber-chosen id ``sub``.

    Subscribing again with an id already in use changes that subscription's view: the next push is
    a delta against what the subscriber already holds. ``priority`` orders the relay's due
    subscriptions, across all its connections, when it cannot serve them all at once (higher
    first; a waiting subscription gains priority as it waits, so none starves); ``transform``
    adapts the rows for the subscriber.

    ``mode`` is ``latest`` (each push is the view's content at one tick; ticks may be skipped)
    or ``every`` (every seq of the stream, in order, exactly once: a push or a no-update per
    seq; ``rate`` does not apply). An ``every`` subscription may carry ``resume``: the relay
    continues after that seq with no gap and no duplicate, from its memory or the publisher's
    log, or answers ``Error{code: "resync"}`` and starts again with a full push.

    A relay in a map of responsibility answers a new subscription whose part another relay is
    responsible for with ``Error{code: "redirect", location: URL}``, unless ``stay`` is true
    (the subscriber could not reach that relay, or was sent round in a circle): then it serves
    it itself.

    ``relevance`` (region views, mode ``latest``) lets the relay judge what of the view matters
    more: entities near the view's focus at full rate and far ones slower, and the
    subscription's priority from its rows (:class:`Relevance`; docs/concepts.md, "Priority from
    the data").
    ``transduce`` names a transducer the relay runs over the subscription's pushes; its pushes
    then carry the transducer's output (:class:`Transduce`).
    ``confirmed`` (mode ``latest``): only rows the publisher's stream carries; without it, writes
    made through the relay are pushed at once, provisionally (``Push.provisional``), and
    corrected if the publisher refuses or overrides them (docs/concepts.md, "Two paths").
    """

    sub: int
    dataset: str
    view: View
    rate: float = 10.0
    priority: int = 0
    transform: Transform | None = None
    mode: Mode = "latest"
    resume: Resume | None = None
    stay: bool = False
    relevance: Relevance | None = None
    transduce: Transduce | None = None
    confirmed: bool = False


class Unsubscribe(Frame, tag="unsubscribe", frozen=True):
    """Stop subscription ``sub``."""

    sub: int


class Subscribed(Frame, tag="subscribed", frozen=True):
    """The relay accepted subscription ``sub``; rows will carry these columns, keyed by ``key``."""

    sub: int
    key: str
    columns: list[str]


class Unsubscribed(Frame, tag="unsubscribed", frozen=True):
    """Subscription ``sub`` is gone; no more pushes for it follow."""

    sub: int


class Push(Frame, tag="push", frozen=True):
    """The view's content at one publisher tick, as a delta against the previous push.

    ``full`` marks the first push of a subscription (or the first after a view change), whose
    ``entered`` rows are the whole view. ``left`` holds only the key column. ``provisional``:
    it carries rows of writes the publisher has not confirmed yet (``Subscribe.confirmed``).
    """

    sub: int
    epoch: int
    seq: int
    tick: int
    tick_time: float
    full: bool
    entered: Columns
    updated: Columns
    left: Columns
    provisional: bool = False


class NoUpdate(Frame, tag="no_update", frozen=True):
    """Nothing in the view changed up to this tick (founding document [0139])."""

    sub: int
    epoch: int
    seq: int
    tick: int


#: A dataset kind's name (``views.registry``: ``space``, ``sql``, ``topic``, ``path``, ``objects``
#: and any registered since); a relay refuses a catalog naming one it does not know.
IndexKind = str


class DatasetInfo(msgspec.Struct, frozen=True):
    """What a relay needs to know of a dataset: its key, columns and how views select rows.

    ``index`` names the dataset's kind (``views.registry``; ``space``: region views over
    ``index_columns`` such as ``("x", "y")``); ``columns`` maps each column to its numpy dtype
    string (or ``"str"``); ``nullable`` lists the columns that may hold NULL (never the key;
    string columns hold ``None`` whether listed or not).
    """

    name: str
    key: str
    columns: dict[str, str]
    index: IndexKind
    index_columns: list[str]
    nullable: list[str] = []


class Catalog(Frame, tag="catalog", frozen=True):
    """The datasets a publisher serves; sent right after ``Welcome``."""

    datasets: list[DatasetInfo]


class Acquire(Frame, tag="acquire", frozen=True):
    """A relay asks the publisher for the data of one upstream primitive, named ``prim``;
    ``below``: a relay's worker to its leader, acquired for the relays below the worker."""

    prim: int
    dataset: str
    view: View
    below: bool = False


class Release(Frame, tag="release", frozen=True):
    """A relay no longer needs upstream primitive ``prim``."""

    prim: int


class Batch(Frame, tag="batch", frozen=True):
    """One micro-batch of changes for one relay, stamped (dataset, epoch, seq, tick).

    Every relay gets one batch per micro-batch, empty or not, so a missing ``seq`` is visible.
    ``snapshots`` lists the primitives whose whole current content is included (as of ``tick``):
    the relay first drops what it held inside them, then applies ``upserts`` and ``deletes``.
    """

    dataset: str
    epoch: int
    seq: int
    tick: int
    tick_time: float
    upserts: Columns
    deletes: Columns
    snapshots: list[int] = []
    #: A leader to its workers: no rows, its whole state is in its shared memory there.
    shared: SharedRef | None = None


class SharedRef(msgspec.Struct, frozen=True):
    """A leader's state in shared memory: the file (in its workers' directory), generation."""

    name: str
    generation: int


class Adopted(Frame, tag="adopted", frozen=True):
    """A worker reads this generation of a dataset, none older (``relay.shell.sharedstate``)."""

    dataset: str
    generation: int


class Curious(Frame, tag="curious", frozen=True):
    """A relay asks again for micro-batches it lacks: seqs ``first..last`` of (dataset, epoch).

    The *curiosity* of US 7,487,246 (gapless delivery), a NACK: the publisher answers from its
    log with one ``Knowledge`` per seq, or with ``Error{code: "lost", ref: req}`` for seqs no
    longer (or never) logged.
    """

    req: int
    dataset: str
    epoch: int
    first: int
    last: int


class Horizon(Frame, tag="horizon", frozen=True):
    """A relay still needs seqs ``seq`` onwards of (dataset, epoch) from the publisher's log.

    The lowest seq its ``every`` subscriptions may still ask for (US 7,487,246: a subscriber's
    release); ``seq = -1``: it needs nothing any more. The publisher does not trim the log past
    the lowest horizon of its connected relays, whatever the age of the entries.
    """

    dataset: str
    epoch: int
    seq: int


class Knowledge(Frame, tag="knowledge", frozen=True):
    """One logged micro-batch's whole change (every changed row, and every deleted key), sent
    in answer to ``Curious``; it does not advance the relay's live stream."""

    req: int
    dataset: str
    epoch: int
    seq: int
    tick: int
    tick_time: float
    upserts: Columns
    deletes: Columns


class ReadState(Frame, tag="read_state", frozen=True):
    """Ask the publisher for its authoritative rows inside ``view`` as of ``tick``.

    ``tick`` must be a tick some recent micro-batch ended at (any push's ``tick`` is one); the
    publisher waits for it if it is still ahead. ``tick = -1`` reads the latest state.
    """

    req: int
    dataset: str
    view: View
    tick: int = -1


class StateRows(Frame, tag="state_rows", frozen=True):
    """The publisher's authoritative rows for request ``req``, as of ``tick``."""

    req: int
    dataset: str
    tick: int
    rows: Columns


class Publish(Frame, tag="publish", frozen=True):
    """A producer's upserts (whole rows) and deletes (keys) for an ``ingest`` dataset."""

    req: int
    dataset: str
    upserts: Columns = Columns()
    deletes: Columns = Columns()


class Published(Frame, tag="published", frozen=True):
    """The events of request ``req`` are durably in the ingest log at offsets first..last."""

    req: int
    first: int
    last: int


class Written(Frame, tag="written", frozen=True):
    """A write to ``dataset`` made through another relay or a producer, durably logged at
    ingest offsets first..last, passed at once to the relays whose coverage it may touch (and
    on by them to the relays below). A relay shows it to its ``latest`` subscribers as
    provisional; the first state it swaps in with ``tick >= last`` confirms it (docs/concepts.md,
    "Two paths")."""

    dataset: str
    first: int
    last: int
    upserts: Columns = Columns()
    deletes: Columns = Columns()


class Pending(Frame, tag="pending", frozen=True):
    """A relay's leader to its workers only (``fanout relay --workers``): a write made through
    another worker, forwarded to the publisher and not answered yet, passed at once under the
    leader's ``ref`` to the workers ``Written`` would go to. A worker shows it provisionally, as
    a write made through it, until ``Settled`` with the same ``ref`` (docs/protocol.md)."""

    ref: int
    dataset: str
    upserts: Columns = Columns()
    deletes: Columns = Columns()


class Settled(Frame, tag="settled", frozen=True):
    """A relay's leader to its workers only: the publisher's answer to ``Pending`` ``ref``.
    Logged at ingest offsets first..last: confirmed by the worker's first state with ``tick >=
    last``; neither given: refused, withdrawn where it was shown. A worker told ``Pending`` of
    a write is sent no ``Written`` of it."""

    ref: int
    first: int | None = None
    last: int | None = None


class Responsibility(Frame, tag="responsibility", frozen=True):
    """A relay's leader to its workers only, in a map of responsibility (``--registry``): the
    map as the leader last read it, and whether its lease is its own (``serving``). Sent
    before the catalog and on every change; each worker redirects new subscriptions and ends
    moved ones by it (``cluster.mapcopy``). ``assigned``: part -> ``Assignment.stored()``."""

    me: str
    side: float
    members: dict[str, str] = {}
    standby: list[str] = []
    assigned: dict[str, str] = {}
    serving: bool = True


class MapWanted(Frame, tag="map_wanted", frozen=True):
    """A relay's worker to its leader only: read the map afresh and send ``Responsibility``
    (an HTTP stream is about to be redirected, ``Registry.confirm``)."""


class WorkerLoad(Frame, tag="worker_load", frozen=True):
    """A relay's worker to its leader only, every second while the relay splits and merges on
    load (``cluster.splitting``): its subscriptions by part of the map's grid of ``side``, the
    box each part warms (``handover.warm``: none for a part holding another view than a region),
    and its counters so far: subscriptions, pushes and no-updates sent, CPU seconds."""

    side: float
    parts: dict[str, int] = {}
    boxes: dict[str, str] = {}
    subscriptions: int = 0
    pushes: int = 0
    cpu: float = 0.0


class LiveWrites(Frame, tag="live_writes", frozen=True):
    """Whether this relay wants the writes to ``dataset`` made elsewhere passed at once
    (``Written``): it does while a ``latest`` subscription of it takes live writes, here or on
    a relay below. Until it says so it is passed none (the batches carry them anyway)."""

    dataset: str
    wanted: bool = True


class DatasetState(Frame, tag="dataset_state", frozen=True):
    """A dataset's streaming query stopped (``running`` false) or runs again, told to relays.

    The publisher restarts a failed query from its checkpoint after ``retry_in`` seconds; the
    relay keeps its connection and its subscribers, whose views wait for the next batch.
    """

    dataset: str
    running: bool
    reason: str = ""
    retry_in: float = 0.0


class Resync(Frame, tag="resync", frozen=True):
    """A relay to a relay below: its batches lack the changes inside primitives ``prims``
    (the below's ids) of ``dataset`` until their snapshots come again (its own coverage is
    being acquired anew: the map moved parts, a relay it forwards from was lost). The relay below
    holds them not ready until then; its ``every`` streams catch up from the log."""

    dataset: str
    prims: list[int]


ToRelay = Hello | Subscribe | Unsubscribe | Publish
ToSubscriber = Welcome | Subscribed | Push | NoUpdate | Unsubscribed | Published | Error
ToPublisher = (
    Hello
    | Acquire
    | Release
    | ReadState
    | Publish
    | Curious
    | Horizon
    | LiveWrites
    | Adopted
    | MapWanted
    | WorkerLoad
)
FromPublisher = (
    Welcome
    | Catalog
    | Batch
    | Knowledge
    | StateRows
    | Published
    | Written
    | Pending
    | Settled
    | Responsibility
    | DatasetState
    | Resync
    | Error
)
