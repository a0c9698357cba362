"""The relay's API, as its front ends see it, and the one interface every front end has.

A front end (the WebSocket subscriber server, HTTP streams, MQTT, relays below) is made by the
relay's composition root (``relay.shell.server``), started with the relay's API and the
relay's ``TaskGroup`` (``FrontEnd.start`` returns once it serves), and stopped the same way
(``FrontEnd.stop``). It brings connections in as ``Downstream``s and hands what they ask to
the relay; what is admitted is the relay's to decide (``relay.core.admission``), never the
front end's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from fanout.auth import Grant
from fanout.metrics import Histogram, Sample
from fanout.views import View
from fanout.wire.messages import DatasetInfo, Error, Publish, Role, Subscribe, Unsubscribe


class Downstream(Protocol):
    """One connection the relay pushes to (a WebSocket's ``Outbound``, an HTTP stream).

    Attributes:
        sent: frames (events) written so far.
        sent_bytes: their bytes.
        closed_for: why the relay cut it off (a slow consumer), if it did.
    """

    sent: int
    sent_bytes: int
    closed_for: str | None

    @property
    def idle(self) -> bool:
        """Everything written: it may take the next push."""
        ...

    def stalled_for(self, now: float) -> float:
        """Seconds it has held bytes its client did not read (0 if none)."""
        ...

    def offer(self, data: bytes, control: bool = False) -> bool:
        """Send one of the relay's frames; returns whether it was taken."""
        ...

    def close(self, reason: str) -> None:
        """Cut it off (a slow consumer)."""
        ...

    def offer_probed(self, data: bytes, acked: Callable[[float], None]) -> bool:
        """``offer(data)``, then ask the peer to acknowledge every byte written so far (a
        WebSocket ping, in the same write as the frame when it can be); ``acked(at)`` once it
        did. Returns whether it was asked (an HTTP stream cannot be)."""
        ...


class RelayApi(Protocol):
    """What a front end may ask of the relay (``relay.shell.server.RelayServer``)."""

    def open(self, downstream: Downstream) -> int:
        """Count a new connection in, not connected yet; returns its client number."""
        ...

    def connect(self, client: int, grant: object, capabilities: Sequence[str] = ()) -> None:
        """The connection's handshake is done, its token granting ``grant``."""
        ...

    def close(self, client: int) -> Downstream:
        """The connection is over: its subscriptions end; it is counted until ``closed``."""
        ...

    def closed(self, downstream: Downstream) -> None:
        """The connection's last bytes went out: keep what it wrote in the counts."""
        ...

    def subscribe(self, client: int, request: Subscribe) -> None:
        """Act on a subscription request, as admission says (``relay.core.admission``)."""
        ...

    def unsubscribe(self, client: int, request: Unsubscribe) -> None:
        """End one of the connection's subscriptions."""
        ...

    def write(self, client: int, request: Publish) -> None:
        """Forward the connection's write to the publisher, or refuse it."""
        ...

    async def confirm(self, request: Subscribe) -> None:
        """Make sure the map a redirect of ``request`` would follow is not stale: an HTTP
        client follows redirects without asking to stay (``RelayServer.confirm``)."""
        ...

    def writable(self, client: int) -> None:
        """The connection wrote everything it had."""
        ...

    def wake(self) -> None:
        """Something changed: let the pump look for due pushes."""
        ...

    def room(self) -> str | None:
        """Why one more connection is refused (the relay serves its most), or None."""
        ...

    def authenticate(self, token: str | None, role: str = "subscriber") -> Grant | None:
        """What ``token`` grants (None without authentication).

        Raises:
            Unauthorized: authentication is configured and the token is missing, not valid,
                or does not grant ``role``.
        """
        ...

    @property
    def authenticating(self) -> bool:
        """Whether connections must present a token."""
        ...

    @property
    def roles(self) -> frozenset[Role]:
        """The roles a connection's ``Hello`` may take (``relay.core.admission.roles``)."""
        ...

    def catalog(self) -> list[DatasetInfo]:
        """The publisher's datasets (empty before the relay is connected upstream)."""
        ...

    def datasets(self) -> Mapping[str, str]:
        """The publisher's datasets, name -> index kind."""
        ...

    def held(self) -> Mapping[str, int]:
        """The rows the relay holds of each dataset now (its subscribers' views' union), by
        name; a dataset none of its subscribers views is held by none."""
        ...

    def samples(self) -> list[Sample | Histogram]:
        """The relay's metrics now (``GET /metrics``)."""
        ...

    def explain(
        self, dataset: str, view: View, rules: Mapping[str, Sequence[str]] | None, rate: float
    ) -> dict[str, Any]:
        """A live EXPLAIN of ``view`` (``relay.core.explaining.explain``).

        Raises:
            InvalidView, Unauthorized: as ``explain``.
        """
        ...

    def subscribers(self, count: int) -> dict[str, Any]:
        """The ``count`` subscriptions that cost the most (``relay.shell.admin``)."""
        ...

    def batches(self) -> dict[str, Any]:
        """The last batches' wall-clock times through the relay (``relay.shell.admin``)."""
        ...

    def unready(self) -> str | None:
        """Why the relay should be sent no subscribers now (``GET /readyz``), or None."""
        ...

    def local_url(self) -> str:
        """Where the relay serves subscribers, as a program on this host reaches it."""
        ...


class Redirects(Protocol):
    """What decides which subscriptions a relay of a map of responsibility sends elsewhere: its
    registry (``cluster.registry``), or a worker's copy of its leader's map
    (``cluster.mapcopy``)."""

    def redirect(self, request: Subscribe, held: bool) -> Error | None:
        """The redirect answering ``request`` (``held``: a view change), or None to serve it."""
        ...

    async def confirm(self, request: Subscribe) -> None:
        """Make sure the map is not a beat old before ``request`` (an HTTP stream) is
        redirected."""
        ...


class FrontEnd(Protocol):
    """A way in to the relay, started and stopped by the composition root."""

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Start serving, every task of its own in ``tasks``; return once it serves."""
        ...

    async def stop(self) -> None:
        """Stop serving: take no new connection, end those it has, wait for them."""
        ...
