"""A relay's sans-I/O core ready for a conversation: its catalog learnt, its upstream connected.

``ready_core()`` is what a test of frames in and frames out starts from, without sockets or
a publisher: the core knows ``agents`` (or the datasets given) and holds nothing yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.data.tables import TableStore
from fanout.testing.catalog import AGENTS
from fanout.wire.messages import Acquire, Catalog, DatasetInfo, Frame, NoUpdate, Push, Subscribed

#: The policy tests start from: views widened by a margin, released at once.
POLICY = Policy(widen="margin", grace=0.0)


def ready_core(*datasets: DatasetInfo, policy: Policy | None = None, **options: Any) -> RelayCore:
    """A ``RelayCore`` that has learnt ``datasets`` (``AGENTS`` when none is given) and whose
    upstream is connected, holding SQL rows in a ``TableStore``.

    Args:
        datasets: the catalog's datasets.
        policy: how views are widened and released (``POLICY`` when omitted).
        **options: more of ``RelayCore``'s keyword arguments (``holding``, ``max_subscriptions``).
    """
    options.setdefault("engine", TableStore())
    core = RelayCore(policy or POLICY, **options)
    core.on_catalog(Catalog(list(datasets or (AGENTS,))))
    core.on_upstream_connected()
    return core


def frames_to(sends: list[Send], to: int) -> list[Frame]:
    """The frames of ``sends`` addressed to ``to`` (a client, or ``UPSTREAM``), in order."""
    return [send.message() for send in sends if send.to == to]


def take(sends: list[Send], snapshots: list[int], apply: Callable[[Push], None]) -> list[Push]:
    """A core's ``sends`` to one client, as a conversation's model takes them: each ``Acquire``
    upstream's primitive appended to ``snapshots``, each ``Push`` given to ``apply`` (and
    returned, in order); anything else sent must be a ``Subscribed`` or a ``NoUpdate``."""
    pushes = []
    for send in sends:
        frame = send.message()
        if send.to == UPSTREAM and isinstance(frame, Acquire):
            snapshots.append(frame.prim)
        elif isinstance(frame, Push):
            apply(frame)
            pushes.append(frame)
        else:
            assert isinstance(frame, Subscribed | NoUpdate), frame
    return pushes
