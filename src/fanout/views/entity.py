"""The row of one key: the upstream primitive a relay holds for an entity it follows.

Founding document [72]: a subscription may be relative to the subscriber's own position, which
the relay looks up in its state. To look it up the relay must hold the entity's row wherever the
entity goes, and to find it in the first place it must be able to ask for it without knowing
where it is. A region cannot say that (short of the whole world), so space datasets also take
this primitive: :class:`Entity` selects the row whose key is ``key``, wherever it is. It is a
relay's primitive, not a subscriber's view.

Its coverage algebra is equality: an entity primitive covers exactly itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.region import format_entity


class Entity(ViewBase, tag="entity", frozen=True):
    """The row whose key is ``key`` (an int or a non-empty string), wherever it is.

    Raises:
        InvalidView: ``key`` is not an int or a non-empty string.
    """

    key: int | str

    def __post_init__(self) -> None:
        key = self.key
        if isinstance(key, bool) or not isinstance(key, int | str) or key == "":
            raise InvalidView(f"entity: key = {key!r} must be an integer or a non-empty string")

    def __str__(self) -> str:
        return f"entity:{format_entity(self.key)}"


def covers(have: Sequence[object], view: Entity) -> bool:
    """Whether ``have`` holds ``view`` itself."""
    return view in have


def residual(have: Sequence[object], view: Entity) -> list[Entity]:
    """``[]`` when ``have`` holds ``view``, else ``[view]``."""
    return [] if covers(have, view) else [view]
