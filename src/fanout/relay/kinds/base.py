"""What a dataset kind does for the relay core: the interface, and the parts it works with.

The core (``relay.core.relaycore``) never asks which kind of dataset it holds. When the catalog
names a dataset it looks its kind up once in the registry (``views.registry``; the kind's
:class:`RelaySide` makes a :class:`DatasetKind`) and from then on asks that object every
question whose answer depends on the kind: subscribing (CA 3197003 [0161], step 818), what to
acquire upstream (steps 830-840), coverage, pushes (steps 890-894), mode ``every`` (US
7,487,246), housekeeping, and what relays below hold here (``tiers``).

Everything a kind needs from the rest of the relay is in :class:`Parts`, shared by all kinds of
one core.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from fanout.relay.core.changesets import ChangeSet, Step, Steps
from fanout.relay.core.downstream import Downstream, Subscription
from fanout.relay.core.planner import Policy, Velocity
from fanout.relay.core.sends import Send
from fanout.relay.core.transforms import Shape
from fanout.relay.core.upstream import Primitive, Upstream
from fanout.relay.data.buffers import Array, Keys, Mask, Table
from fanout.relay.data.engine import QueryEngine
from fanout.relay.data.intake import DatasetState
from fanout.relay.data.pushes import Body, Encodings, Held
from fanout.relay.kinds.lens import RowLens
from fanout.views import View
from fanout.wire.messages import DatasetInfo, Subscribe

#: Seconds after a release during which rows inside the released primitive (and no other) are
#: pruned at each housekeeping: batches already on their way may still bring some.
PRUNE_WINDOW = 2.0


@dataclass
class Parts:
    """The relay's stores, shared by the core and every dataset kind it holds.

    Attributes:
        policy: how regions are planned and how long unneeded primitives are kept.
        upstream: the primitives held at the publisher.
        downstream: the subscriptions served.
        encodings: push bodies cut this generation, shared by equal subscriptions.
        engine: where SQL views are evaluated (None: the relay serves no SQL dataset).
        datasets: the relay's copy of each dataset, by name.
        kinds: each dataset's kind, by name.
        grown, shrunk: how many times ready coverage grew (primitives became ready) and shrank
            (primitives lost or refused): a subscription's servability is asked again only
            when they moved since it was last (growth can only make unservable ones servable,
            shrinkage can break any).
    """

    policy: Policy
    upstream: Upstream
    downstream: Downstream
    encodings: Encodings
    engine: QueryEngine | None
    datasets: dict[str, DatasetState] = field(default_factory=dict)
    kinds: dict[str, DatasetKind] = field(default_factory=dict)
    grown: int = 0
    shrunk: int = 0


class Accepted(msgspec.Struct, frozen=True, gc=False):
    """A subscription accepted: the shape of its rows, their key and columns (``Subscribed``).

    A struct, not a frozen dataclass: one is made for every subscription and view change, and a
    struct is made in C.
    """

    shape: Shape
    key: str
    columns: list[str]


Cut = tuple[Body, Held]
"""A push's body and what its subscriber holds after it."""


class DatasetKind(Protocol):
    """One dataset's kind at the relay: every answer the core needs that depends on it."""

    @property
    def state(self) -> DatasetState:
        """The relay's copy of the dataset (rows and stream position)."""
        ...

    @property
    def metered(self) -> bool:
        """Whether its pushes count against the connection's SQL time."""
        ...

    # -- subscribing ------------------------------------------------------------------

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """Check a subscription's view, transform and mode against the dataset.

        Raises:
            InvalidView: the view is not of the dataset's language, or does not fit it.
            InvalidTransform: the transform cannot apply to its rows.
        """
        ...

    def check_every(self, view: View, shape: Shape) -> None:
        """Refuse what mode ``every`` cannot serve of this view and shape.

        Raises:
            InvalidView, InvalidTransform: naming why.
        """
        ...

    def reads(self, view: View) -> tuple[str, ...]:
        """The datasets a view reads (its own; several for a SQL join)."""
        ...

    def acquire(self, view: View, moving: Velocity | None, subscribing: bool) -> list[Primitive]:
        """Add to the upstream store the primitives to acquire so that held ones cover
        ``view`` (``moving``: how fast it moves; ``subscribing``: it is new or changed); returns
        them (the core sends their ``Acquire``)."""
        ...

    def needs(self, view: View) -> list[tuple[str, View]]:
        """(dataset, view) pairs the view needs held: its own dataset's rows inside it, or the
        primitives of each dataset a SQL join reads."""
        ...

    def plan(self, view: View) -> list[tuple[str, View]]:
        """What ``acquire`` would ask upstream for ``view`` now, as (dataset, primitive) pairs,
        without adding anything: a dry run of the planner (``fanout explain --relay``)."""
        ...

    # -- coverage ---------------------------------------------------------------------

    def locate(self, subscription: Subscription) -> Hashable | None:
        """What the subscription's push is cut from now (a relative view resolved), or None
        if that is not known yet.

        Raises:
            EntityNotHeld: the entity a relative view follows does not exist.
        """
        ...

    def covered(self, located: Hashable, ready_only: bool = True) -> bool:
        """Whether primitives held (ready ones only, unless asked) cover a located view."""
        ...

    def follows(self, view: View) -> bool:
        """Whether the view is planned anew as it moves (so a refusal does not end it)."""
        ...

    # -- pushing ----------------------------------------------------------------------

    def batched(self, subscription: Subscription, located: Hashable) -> bool:
        """Whether this push is cheap and cut together with others (``cut_together``)."""
        ...

    def cut(self, subscription: Subscription, located: Hashable) -> Cut | None:
        """The push from the active state (None: the subscriber holds it already).

        Raises:
            InvalidView: a SQL view's query failed on the relay's rows.
            EntityNotHeld: a ``relative_to`` transform's entity is not held.
        """
        ...

    def cut_together(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[Cut | None]:
        """``cut`` for many batched pushes at once, in order."""
        ...

    def quiet(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[bool]:
        """Which of many batched pushes are quiet: the view holds the same rows, unchanged,
        as its subscriber (held as of the state before this one), so its push is a
        ``NoUpdate`` and it need not be cut (``relay.core.serving`` answers them in bulk)."""
        ...

    def query_seconds(self) -> float:
        """Seconds its queries have run so far (what ``metered`` pushes are charged)."""
        ...

    def ticking(self, view: View) -> float | None:
        """Seconds after which the view's rows may have changed with time alone, the dataset
        unchanged (a query reading the clock), or None if they change only with the rows:
        such a view is cut again at its rate (every that many seconds at most), not only when
        a new state comes."""
        ...

    def lens(self, subscription: Subscription) -> RowLens | None:
        """The subscription's view of single rows, for writes shown at once
        (``relay.core.livepath``), or None: it takes the confirmed path alone."""
        ...

    # -- every mode -------------------------------------------------------------------

    def full_view(self, subscription: Subscription) -> Body:
        """The whole view from the active state (an ``every`` subscription's first push).

        Raises:
            InvalidView: a SQL view's query failed on the relay's rows.
        """
        ...

    def complete_after(self, view: View, seq: int) -> int:
        """The seq after which the relay's batches hold every change inside ``view`` (``seq``
        if no ready primitive bears on it)."""
        ...

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """One seq's push for an ``every`` subscription holding ``held`` (shared: ``steps``).

        Raises:
            InvalidView: a SQL view's query failed on the change's rows.
        """
        ...

    # -- epochs and housekeeping ------------------------------------------------------

    def after_swap(self, readers: Sequence[Subscription]) -> list[Primitive]:
        """Primitives added now that a new state is active (for views that moved), as
        ``acquire``; ``readers``: the subscriptions that read the dataset."""
        ...

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives unneeded for the grace period; prune rows nothing holds."""
        ...

    def stats(self) -> dict[str, float]:
        """Counters of this kind's own work, summed over its datasets by the core."""
        ...

    # -- relays below -----------------------------------------------------------------

    def primitive(self, view: View) -> View:
        """A primitive a relay below acquires here, as this relay holds it for that relay:
        what the publisher would select by it (options a relay applies downstream dropped).

        Raises:
            InvalidView: it is not a primitive this relay serves of the dataset, naming why.
        """
        ...

    def reach(self, rows: Mapping[str, Array]) -> Mapping[str, Array]:
        """The rows a write of ``rows`` made elsewhere may change, for ``holds`` to judge: the
        rows themselves, or more where a write changes rows it does not name (objects: every
        directory above an object it names)."""
        ...

    def holds(self, prims: Sequence[View], rows: Mapping[str, Array]) -> Mask:
        """Which of ``rows`` (column -> values, aligned, every column the relay holds) any of
        the primitives ``prims`` (as ``primitive`` or ``acquire`` made them) holds."""
        ...

    def holder(self, rows: Mapping[str, Array]) -> Callable[[Sequence[View]], Mask]:
        """``holds`` of ``rows`` for several sets of primitives: what the rows need prepared
        (sorted, indexed) is prepared once for all of them (a batch cut for each relay below)."""
        ...

    def contents(self, prims: Sequence[View], table: Table | None = None) -> dict[str, Array]:
        """The rows of ``table`` (None: the active state) any of ``prims`` holds, every
        column the relay holds."""
        ...


@dataclass(frozen=True)
class RelaySide:
    """A dataset kind's part at the relay (``views.registry.Kind.relay`` names it).

    Attributes:
        serve: makes the object serving one dataset of the kind (its state empty); raises
            ``ProtocolError`` if the relay cannot hold it.
        stats: the counters its objects' ``stats`` report.
    """

    serve: Callable[[DatasetInfo, Parts], DatasetKind]
    stats: tuple[str, ...] = ()
