"""Transducers: code at the relay turning a view's stream into another, m messages in and n out
(CA 3197003 [0128]; docs/transducers.md).

A subscription may name one (``Subscribe.transduce``): the built-in ``window``, SQL over the
view's last ticks in DuckDB, or a Python one the relay's operator installed through the
entry-point group ``fanout.transducers`` — never code sent by a subscriber. The relay's core
(``relay.core.transducing``) hands each push of a transduced subscription to its session here,
which keeps the view's recent history (``window``), evaluates the transducer under its budget
(``budget``) and sends the output as a delta (``session``).
"""

from fanout.transducers.budget import Budget, InvalidTransducer, OverBudget, TransducerStopped
from fanout.transducers.registry import GROUP, WINDOW, Transducers
from fanout.transducers.session import Session, Transducer

__all__ = [
    "GROUP",
    "WINDOW",
    "Budget",
    "InvalidTransducer",
    "OverBudget",
    "Session",
    "Transducer",
    "TransducerStopped",
    "Transducers",
]
