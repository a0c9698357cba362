"""What a ``Subscribe`` may ask for besides its view: its rows adapted (``Transform``), rate
tiers and priority from the data (``Relevance``), a transducer (``Transduce``), and where an
``every`` stream resumes (``Resume``). Part of the protocol's frames (``wire.messages``,
docs/protocol.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import msgspec

from fanout.wire.columns import Columns

PriorityFrom = Literal["given", "changes", "nearest"]


class Tier(msgspec.Struct, frozen=True):
    """One rate tier of a ``Relevance``: entities farther than ``beyond`` from the view's focus
    are sent on one push in ``every`` (a changed entity waits for its tier's push)."""

    beyond: float
    every: int


class Relevance(msgspec.Struct, frozen=True, omit_defaults=True):
    """Priority from the data (CA 3197003 [0033], [0107], [0145]): what of a region view
    matters more, as the relay judges it from its state. Region datasets, mode ``latest``.

    Attributes:
        tiers: rate tiers by distance from the focus, ``beyond`` increasing: an entity within
            the first tier's ``beyond`` goes at every push; one beyond a tier's ``beyond`` (and
            within the next's) only on pushes whose number the tier's ``every`` divides. An
            entity entering or leaving the view is never delayed (``entered``, ``left``).
        focus: the point distances are measured from, in the view's coordinates (a relative
            view's: relative to its entity). None: the view's centre (a box's middle, a sphere's
            or sector's centre, a union's or intersection's bounding box's middle); a relative
            view's entity itself.
        priority_from: ``given`` (the subscription's ``priority`` as it is), ``changes`` (plus
            log2(1 + rows of the view changed since its last push)) or ``nearest`` (plus up to 10
            as its nearest entity is nearer the focus): how the relay orders due pushes.
    """

    tiers: list[Tier] = []
    focus: list[float] | None = None
    priority_from: PriorityFrom = "given"


class Transduce(msgspec.Struct, frozen=True, omit_defaults=True):
    """A transducer the relay runs over a subscription's pushes (CA 3197003 [0128]): it turns
    the view's stream into another, m messages in, n out (docs/transducers.md).

    Attributes:
        name: the transducer: ``window`` (SQL over the view's last ticks, built in) or one the
            relay's operator installed (entry-point group ``fanout.transducers``). Never code
            sent by the subscriber: only its parameters travel.
        params: the transducer's parameters (``window``: ``query``, ``ticks``, ``key``).

    The subscription's ``Subscribed`` then names the output's key and columns, and its pushes
    carry the output, a delta against the previous tick's. An unknown transducer or bad
    parameters are refused with ``Error{code: "invalid_transducer"}``; a transducer that fails
    or goes over its budget ends the subscription with ``Error{code: "transducer_stopped"}``.
    """

    name: str
    params: dict[str, Any] = {}


class Resume(msgspec.Struct, frozen=True):
    """Where an ``every``-mode subscriber stopped: its resume token for one stream.

    Attributes:
        epoch, seq: the publisher stream and the last seq it received (push or no-update).
        keys: the key column of the rows it holds (the view's content after that seq).
    """

    epoch: int
    seq: int
    keys: Columns


class Transform(msgspec.Struct, frozen=True, omit_defaults=True):
    """How a relay adapts a subscription's rows for its subscriber (CA 3197003 [0091]-[0093]).

    The relay applies the transform to floating-point columns only (integers and strings travel
    as stored), in this order: projection, relative coordinates, then precision.

    Attributes:
        columns: the columns to send (the key is always sent, first); None sends every column.
            A column the dataset does not have is refused with ``Error{code:
            "invalid_transform"}`` at subscribe time.
        precision: ``float64`` as stored, ``float32``, or ``fixed``: floats become int64
            values counting ``quantum`` units, rounded to nearest (for subscribers without
            floating point); values beyond int64 saturate, NaN becomes ``FIXED_NAN``.
        quantum: the unit of ``fixed`` values (0: ``DEFAULT_QUANTUM``), and for ``float64`` /
            ``float32`` an optional rounding step (0: no rounding).
        relative_to: the key of an entity; the dataset's index coordinates (``x, y[, z]``) are
            sent relative to that entity's position (the subscriber's own avatar, say), looked
            up in the relay's state at the tick of each push. If the relay does not hold the
            entity when a push is due, the subscription ends with ``Error{code:
            "entity_not_held"}``: absolute coordinates are never sent in their place.

    Capabilities: a subscriber lists in ``Hello.capabilities`` the number formats it decodes —
    ``float64``, ``float32``, ``fixed`` (integers; every subscriber decodes those). An empty
    list declares nothing and means every format. :meth:`negotiate` is the rule both sides
    apply to learn the effective transform.
    """

    columns: list[str] | None = None
    precision: Literal["float64", "float32", "fixed"] = "float64"
    quantum: float = 0.0
    relative_to: int | str | None = None

    #: Capability names (``Hello.capabilities``).
    FLOAT64: ClassVar[str] = "float64"
    FLOAT32: ClassVar[str] = "float32"
    FIXED: ClassVar[str] = "fixed"
    #: The unit of ``fixed`` values when the transform names none: 1/1024, exact in binary.
    DEFAULT_QUANTUM: ClassVar[float] = 1.0 / 1024.0
    #: What a NaN becomes in ``fixed`` precision (the smallest int64; finite values saturate
    #: one above it).
    FIXED_NAN: ClassVar[int] = -(2**63)

    def negotiate(self, capabilities: Sequence[str]) -> Transform:
        """The transform a relay applies for a subscriber that declared ``capabilities``.

        The precision asked for is kept if the subscriber decodes it; otherwise the other float
        format if it decodes that; otherwise ``fixed``. ``fixed`` without a quantum gets
        ``DEFAULT_QUANTUM``. Capability names this version does not know are ignored.
        """
        declared = set(capabilities)
        every = {self.FLOAT64, self.FLOAT32}
        floats = every & declared if declared else every
        precision = self.precision
        if precision != "fixed" and precision not in floats:
            other: Literal["float64", "float32"] = (
                "float32" if precision == "float64" else "float64"
            )
            precision = other if other in floats else "fixed"
        quantum = self.quantum
        if precision == self.FIXED and quantum == 0.0:
            quantum = self.DEFAULT_QUANTUM
        if (precision, quantum) == (self.precision, self.quantum):
            return self
        return msgspec.structs.replace(self, precision=precision, quantum=quantum)
