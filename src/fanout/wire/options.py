"""What a ``Subscribe`` may ask for besides its view: rate tiers and priority from the data
(``Relevance``), a transducer (``Transduce``), and where an ``every`` stream resumes
(``Resume``). Part of the protocol's frames (``wire.messages``, docs/protocol.md).
"""

from __future__ import annotations

from typing import Any, Literal

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
