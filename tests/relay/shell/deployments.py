"""What the relay shell's tests share: a scripted publisher and a real relay on loopback."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

from fanout.relay.config import Limits, Planning, Upstream
from fanout.relay.core.planner import Policy
from fanout.relay.shell.server import RelayServer
from fanout.testing.catalog import AGENTS, catalog
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay

INFO = AGENTS
MARGIN = Planning(Policy(widen="margin"))
#: The limits these relays run with: a push left unread for a second closes its subscriber.
LIMITS = Limits(stall_timeout=1.0)


@contextlib.asynccontextmanager
async def running(
    publisher: ScriptedPublisher | None = None,
    *,
    upstream: Mapping[str, Any] = MappingProxyType({}),
    **sections: object,
) -> AsyncIterator[tuple[ScriptedPublisher, RelayServer, str]]:
    """A scripted publisher and a real relay on loopback; ``sections`` override RelayConfig's,
    ``upstream`` its upstream section's fields."""
    publisher = publisher or ScriptedPublisher(catalog())
    settings = {"planning": MARGIN, "limits": LIMITS, **sections}
    async with (
        serving(publisher) as url,
        running_relay(Upstream(url, **{"reconnect_delay": 0.05, **upstream}), **settings) as (
            relay,
            relay_url,
        ),
    ):
        yield publisher, relay, relay_url


async def next_update(view, timeout: float = 5.0):
    iterator = view.__aiter__()
    return await asyncio.wait_for(iterator.__anext__(), timeout)
