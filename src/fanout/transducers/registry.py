"""The relay's transducers: the built-in ``window`` and those its operator installed, found by
name when a subscription asks for one (docs/transducers.md).

An installed transducer is a callable registered in the entry-point group ``fanout.transducers``
(``name = "package.module:Factory"``), called with the subscriber's parameters and returning a
``transducers.session.Transducer``; it raises ``InvalidTransducer`` for parameters it refuses.
Only the operator installs code: a subscriber names a transducer and passes parameters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pyarrow as pa

from fanout.transducers.budget import MEMORY, Budget, InvalidTransducer
from fanout.transducers.session import Session, Transducer
from fanout.transducers.sql import WindowEngine, WindowSql
from fanout.wire.options import Transduce

#: The entry-point group installed transducers are registered in.
GROUP = "fanout.transducers"
#: The built-in SQL transducer's name.
WINDOW = "window"

Factory = Callable[[Mapping[str, Any]], Transducer]


class Transducers:
    """The transducers a relay offers, their budget and the DuckDB engine ``window`` runs on.

    Args:
        budget: each transducer's limits.
        points: the installed transducers' entry points (default: those of ``GROUP``).
        clock: what evaluations are timed with.
        memory: the memory ``window`` queries may use together (DuckDB's ``memory_limit``).
    """

    def __init__(
        self,
        budget: Budget | None = None,
        points: Iterable[EntryPoint] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        memory: str = MEMORY,
    ) -> None:
        self.budget = budget or Budget()
        self._points = points
        self._factories: dict[str, Factory] | None = None
        self._clock = clock
        self.engine = WindowEngine(self.budget.seconds, memory)

    def names(self) -> list[str]:
        """Every transducer offered, sorted."""
        return sorted({WINDOW, *self._installed()})

    def _installed(self) -> dict[str, Factory]:
        if self._factories is None:
            points = entry_points(group=GROUP) if self._points is None else self._points
            self._factories = {point.name: point.load() for point in points}
        return self._factories

    def start(self, spec: Transduce, schema: pa.Schema) -> Session:
        """A session of the transducer ``spec`` names, over a view of ``schema`` (key first).

        Raises:
            InvalidTransducer: no such transducer, or it refuses the parameters or the view.
        """
        transducer: Transducer
        if spec.name == WINDOW:
            transducer = WindowSql(spec.params, self.engine, self.budget)
        else:
            factory = self._installed().get(spec.name)
            if factory is None:
                raise InvalidTransducer(
                    f"no transducer {spec.name!r} on this relay (it has {', '.join(self.names())})"
                )
            try:
                transducer = factory(spec.params)
            except InvalidTransducer:
                raise
            except Exception as exc:  # operator-installed code refusing what it was given
                raise InvalidTransducer(
                    f"transducer {spec.name!r} refused its parameters: {type(exc).__name__}: {exc}"
                ) from exc
        ticks = getattr(transducer, "ticks", None)
        if not isinstance(ticks, int) or not 1 <= ticks <= self.budget.max_ticks:
            raise InvalidTransducer(
                f"transducer {spec.name!r} reads {ticks!r} ticks; at most"
                f" {self.budget.max_ticks} are allowed"
            )
        try:
            return Session(transducer, schema, self.budget, self._clock)
        except InvalidTransducer:
            raise
        except Exception as exc:  # operator-installed code refusing the view
            raise InvalidTransducer(
                f"transducer {spec.name!r} refused the view: {type(exc).__name__}: {exc}"
            ) from exc
