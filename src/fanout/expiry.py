"""A connection ends when its token expires (docs/security.md#expiry).

A token is checked once, at the connection's ``Hello`` (or an HTTP stream's request); its ``exp``
then bounds the connection too. When ``exp`` (plus the configured leeway) passes, a relay or the
publisher sends the connection ``Error{code: "unauthorized", message: "the token has expired"}``
and closes it with 1008 (an HTTP stream: a last ``error`` event or line, then the end of the
response). Everyone else on the server goes on being served.

Nothing is checked per frame: each connection's serving loop already runs inside an
``asyncio.timeout`` for its handshake, and once the ``Hello`` is accepted that timer is moved to
the token's expiry instead of being cleared (``deadline``); it is one ``loop.call_at`` handle per
connection, which the event loop keeps in its heap. A client keeps its access by connecting
again with a fresh token before the old one expires (mode ``every`` resumes where it was); a
token is not renewed on an open connection.
"""

from __future__ import annotations

import asyncio
import time

from fanout.auth import Grant
from fanout.wire.messages import Error

#: What the connection is told, in the ``Error`` frame and the close frame's reason.
EXPIRED = "the token has expired"


def deadline(grant: object, loop: asyncio.AbstractEventLoop | None = None) -> float | None:
    """When, on the event loop's clock, a connection admitted with ``grant`` is to end.

    Args:
        grant: what its token granted (a :class:`~fanout.auth.Grant`); anything else (None:
            no authentication) has no expiry.
        loop: the event loop (default: the running one).

    Returns:
        The loop time of the token's ``exp`` plus the leeway the verifier allowed (now, if that
        has passed already), or None.
    """
    if not isinstance(grant, Grant):
        return None
    clock = loop or asyncio.get_running_loop()
    return clock.time() + max(0.0, grant.expires + grant.leeway - time.time())


def expired() -> Error:
    """The frame a connection whose token expired is sent before it is closed."""
    return Error(code="unauthorized", message=EXPIRED)
