"""QNX PPS object paths in the relay's algebra: release's probes (``relay.core.release``) and
access rules (``relay.core.rules``: a path narrowed to the scopes of the rules it meets)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from fanout.errors import InvalidView, Unauthorized
from fanout.relay.core.release import ReleasePart
from fanout.relay.core.rules import Outside, RulesPart
from fanout.views import View, objects
from fanout.views.anyof import AnyOf
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


class PathRules(RulesPart):
    """An object path not inside the rules: narrowed to them."""

    def narrow(self, view: View, granted: Sequence[View], dataset: str) -> View:
        if isinstance(view, ObjectPath):
            return _narrow_path(view, granted, dataset)
        return super().narrow(view, granted, dataset)


def _narrow_path(view: ObjectPath, granted: Sequence[View], dataset: str) -> View:
    """An object path narrowed to the scopes of the rules it meets: the object it names, or
    the objects of its directory each rule grants, with the view's options; one path, or any
    of several.

    Raises:
        Unauthorized: ``forbidden``: no rule meets it, or one that does selects attributes or
            values (``f=``) and does not hold the whole view (the intersection of two ``f=``
            selections is no path).
    """
    scopes: list[str] = []
    for number, rule in enumerate(granted, 1):
        if not isinstance(rule, ObjectPath):
            continue
        scope = _scope_meet(view, rule)
        if scope is None:
            continue
        if rule.attributes is not None or rule.filters:
            raise Unauthorized(
                "forbidden",
                f"your rule {number} on {dataset!r} selects attributes or values (f=) and"
                f" holds only part of {view}: subscribe to a view inside it",
            )
        if rule.all and not view.all:
            scopes = [scope]  # the directory's rule grants the view's one object whole
            break
        if scope not in scopes:
            scopes.append(scope)
    if not scopes:
        raise Outside(f"the path {view} meets none of your rules on {dataset!r}")
    options = view.path.partition("?")[2]
    try:
        paths = [ObjectPath(f"{scope}?{options}" if options else scope) for scope in scopes]
    except InvalidView as exc:  # an option of a directory's, such as deltadir, on an object
        raise Unauthorized(
            "forbidden",
            f"the path {view} is narrowed by your rules on {dataset!r} to objects, which its"
            f" options do not fit ({exc}): subscribe to the objects your rules name",
        ) from None
    return paths[0] if len(paths) == 1 else AnyOf(tuple(paths))


def _scope_meet(view: ObjectPath, rule: ObjectPath) -> str | None:
    """The object path (no options) both scopes hold: the directory's ``.all``, one object,
    or None."""
    if view.directory.rstrip("/") != rule.directory.rstrip("/"):
        return None
    if view.all:
        return rule.object_path
    if rule.all or rule.object == view.object:
        return view.object_path
    return None


RELEASE = PathRelease()
RULES = PathRules()
