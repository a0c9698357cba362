"""A dataset kind for tests, and an example of one: ``exact``, topic names matched exactly.

Its views are MQTT topic filters without wildcards or ``$share`` (``views.topic``); a view
selects the rows whose topic column is exactly its text. It is what a third party adds: a
registration (:data:`KIND`) naming one part per side, each in a module of its own so that neither
side imports the other's (``relay``: no Spark; ``publisher``: no relay). A test registers it with
``views.registry.register(KIND)`` in its own process, and in the processes it starts by an entry
point in group ``fanout.kinds`` naming ``fanout.testing.exact:KIND``
(:func:`entry_point_on_path` writes one).
"""

from __future__ import annotations

from pathlib import Path

from fanout.views.registry import GROUP, Kind

KIND = Kind("exact", "topic", f"{__name__}.relay:SIDE", f"{__name__}.publisher:SIDE")
"""The ``exact`` kind's registration."""


def entry_point_on_path(folder: Path) -> Path:
    """Write a distribution's metadata registering :data:`KIND` in ``folder`` (a folder to put
    on ``PYTHONPATH`` of the processes that should know the kind); returns ``folder``."""
    info = folder / "fanout_exact_kind-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fanout-exact-kind\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nexact = {__name__}:KIND\n")
    return folder
