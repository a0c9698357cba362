"""Matching changed rows against every relay's upstream primitives (CA 3197003 [0135]-[0137]).

A micro-batch's changed rows of a region dataset are matched in the driver after their collect
(``local``); everything else — other indexes, and reads of the state — is matched in Spark,
one matcher per dataset kind (its ``PublisherSide``, found in ``views.registry``): regions by a
cell-bucketed broadcast join plus an exact refine (``regions``), SQL column boxes (``sql``), MQTT
topic filters bucketed by their first level (``topics``) and object paths bucketed by directory
(``paths``). Every matcher turns the relays' primitives into small broadcast tables once per
change of the registry, then pairs rows with the relays holding them: ``_relay, _prim`` plus the
row's columns. With ``keep_unmatched`` every row appears at least once: rows the bucketed join
does not match also appear with a null ``_relay`` (those matched only by a wide, unbucketed
primitive appear both ways).
"""

from __future__ import annotations

from fanout.publisher.datasets import Dataset
from fanout.publisher.matching.base import Matcher, MatchTables, Prim, PublisherSide
from fanout.views import registry

__all__ = ["MatchTables", "Matcher", "Prim", "PublisherSide", "matcher_for", "side_of"]


def side_of(index: str) -> PublisherSide:
    """The publisher's part of the kind ``index`` names (``views.registry``).

    Raises:
        ProtocolError: no kind is registered by that name.
    """
    side: PublisherSide = registry.lookup(index).part("publisher")
    return side


def matcher_for(dataset: Dataset) -> Matcher:
    """The matcher for a dataset, as its kind makes it."""
    return side_of(dataset.index).matcher(dataset)
