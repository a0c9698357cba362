"""The base every view (subscription language term) is built on.

Views are immutable msgspec Structs, tagged by ``kind``, so a view travels on the wire as itself
(docs/protocol.md) and two equal views hash equal (subscribers with identical views share work).
Constructors validate their arguments in ``__post_init__`` and raise
:class:`fanout.errors.InvalidView`; msgspec calls ``__post_init__`` when decoding too, so a
malformed view from the wire is rejected the same way as one built in code.
"""

from __future__ import annotations

import msgspec


class ViewBase(msgspec.Struct, frozen=True, tag_field="kind", cache_hash=True):
    """Base class of every view and primitive; subclasses set ``tag=...``."""
