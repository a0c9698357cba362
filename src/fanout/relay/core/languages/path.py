"""QNX PPS object paths in the relay's algebra: release's probes (``relay.core.release``)."""

from __future__ import annotations

from collections.abc import Hashable

from fanout.relay.core.release import ReleasePart
from fanout.views import View, objects
from fanout.views.objects import ObjectPath


class PathRelease(ReleasePart):
    """Object paths found by directory: an object meets itself and its directory's ``.all``; a
    ``.all`` everything in its directory."""

    def meets(self, a: View, b: View) -> bool:
        if isinstance(a, ObjectPath) and isinstance(b, ObjectPath):
            return objects.meets(a, b)
        return True

    def registered(self, view: View) -> list[Hashable] | None:
        if not isinstance(view, ObjectPath):
            return None
        directory = view.directory.rstrip("/")
        own = ("all", directory) if view.all else ("object", view.object_path)
        return [own, ("in", directory)]

    def probes(self, view: View) -> list[Hashable] | None:
        if not isinstance(view, ObjectPath):
            return None
        directory = view.directory.rstrip("/")
        if view.all:
            return [("in", directory)]
        return [("object", view.object_path), ("all", directory)]


RELEASE = PathRelease()
