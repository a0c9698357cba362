"""Which relays a write is passed to at once, before Spark's micro-batch carries it (``Written``;
docs/concepts.md, "Two paths"). Pure: the registry's plan and the write's rows in, relay ids out.

1. Only a durable write is passed (``Published``), of a dataset whose relays show live writes
   (``LIVE_KINDS``): a refusal reaches no relay; each confirms by offset or withdraws at its
   deadline.
2. Never back to the relay it came through, nor to one that has not said it wants the
   dataset's live writes (``LiveWrites``: no ``latest`` view there takes them).
3. Per relay: to each holding a primitive of the dataset that selects one of the written rows;
   a write that deletes goes to every relay holding a primitive of the dataset (a key alone
   says nothing of where the row was); one holding a SQL view's primitive gets every write.
4. An ``objects`` write goes as its request, each relay admitting it over the cells it holds
   as it does its own (docs/objects.md says why), to the relays whose paths hold an object it
   names or a directory above one (``views.objects.store.touched``: a write creates its
   missing parents; relays passing it on below choose alike).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence, Set

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.publisher.relaytable import Plan
from fanout.views.members import SELECTING, Selecting, members
from fanout.views.topic import TopicFilter
from fanout.views.topic.index import TopicIndex

#: The dataset kinds (``DatasetInfo.index``) whose relays show a write at once: those with a
#: lens (``relay.kinds.lens``). A write to another is not passed: no relay would show it.
LIVE_KINDS = frozenset({"topic", "path", "sql", "objects"})


class Choice:
    """A plan's primitives of one dataset laid out to choose relays by (rule 3), built once per
    registry version (``Plan.version``): topic filters in one ``TopicIndex`` by relay, so that
    a write costs what its topics do, not every relay's filters; other selecting views (object
    paths) per relay; the relays holding a view not selecting by rows."""

    def __init__(self, plan: Plan) -> None:
        self.version = plan.version
        self.holding = frozenset(relay for relay, prims in plan.prims.items() if prims)
        self.topics = TopicIndex()
        self.selecting: dict[int, list[Selecting]] = {}
        self.whole: set[int] = set()
        for relay, prims in plan.prims.items():
            for view in prims.values():
                if isinstance(view, TopicFilter):
                    self.topics.add(view.topic_filter, relay)
                elif isinstance(view, SELECTING):
                    self.selecting.setdefault(relay, []).append(view)
                else:
                    self.whole.add(relay)

    def selected(
        self, relays: Set[int], rows: Mapping[str, npt.ArrayLike], index: Sequence[str]
    ) -> set[int]:
        """Those of ``relays`` whose primitives select one of ``rows``. A topic that is no topic
        name is selected by no filter (as at a relay and in Spark)."""
        chosen: set[int] = set()
        if len(self.topics):
            for name in np.asarray(rows[index[0]], dtype=object).tolist():
                with contextlib.suppress(InvalidView, TypeError):
                    chosen |= self.topics.match(name)
        chosen &= relays
        for relay in relays - chosen:
            views = self.selecting.get(relay, [])
            if any(members(view, rows, index).any() for view in views):
                chosen.add(relay)
        return chosen


def recipients(
    choice: Choice,
    live: Set[int],
    origin: int | None,
    upserts: Mapping[str, npt.ArrayLike],
    *,
    deletes: bool,
    index: Sequence[str],
) -> list[int]:
    """The relays to pass a write to, in id order (the rules above).

    Args:
        choice: the registry's primitives of the written dataset (``Choice(registry.plan())``).
        live: the relays that want the dataset's live writes (``Registry.live``).
        origin: the relay the write came through (None: a producer's own connection).
        upserts: the written rows, column -> values (every column of the dataset).
        deletes: whether the write deletes keys.
        index: the dataset's index columns (``DatasetInfo.index_columns``).
    """
    wanting = (choice.holding & live) - {origin}
    if deletes:
        return sorted(wanting)
    chosen = wanting & choice.whole
    if upserts and wanting - chosen:
        chosen |= choice.selected(wanting - chosen, upserts, index)
    return sorted(chosen)
