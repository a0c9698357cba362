"""One connection's session at the publisher, sans I/O: frames and batches in, actions out.
``publisher.control`` is its asyncio shell (threads for blocking work, the hello timer). Rules:

1. **Handshake.** A ``Hello`` first (``wire.handshake``), answered ``Welcome`` and the
   ``Catalog``; none within the timeout: ``Error{handshake}`` and close.
2. **Roles.** Only a ``relay`` (registered while connected) acquires, releases, sets horizons and
   live writes wanted, asks ``Curious``; readers and producers send ``ReadState`` and ``Publish``.
3. **Resume.** A relay naming its last seqs is replayed the log after them, then the live
   batches held back since its welcome; a replay that fails is answered ``resync``.
4. **Held back, bounded** by ``HELD_BACK_LIMIT``; one more closes the connection.
5. **Each seq once, in order:** only seqs above the relay's last of that dataset, but a batch of
   that same seq that carries snapshots.
6. **Requests.** ``Acquire``, ``Release``, ``Horizon``, ``LiveWrites`` apply at once (refusals
   answered); ``ReadState``, ``Publish``, ``Curious`` are blocking work; else ``Error{protocol}``.
Phases and their moves: ``Phase``, ``TRANSITIONS``.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fanout.errors import FanoutError
from fanout.publisher.relaytable import Registry
from fanout.views import View
from fanout.wire import codec
from fanout.wire.handshake import AcceptingSession
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    Error,
    Frame,
    Hello,
    Horizon,
    LiveWrites,
    Publish,
    ReadState,
    Release,
    Role,
    ToPublisher,
    Welcome,
)

#: Live batches held back for one relay while it is replayed to, before it is cut off.
HELD_BACK_LIMIT = 1024
#: The roles the publisher serves.
ROLES: frozenset[Role] = frozenset({"relay", "reader", "producer"})


class Phase(enum.Enum):
    """Where a connection is, as far as what it is sent goes."""

    HELLO = "hello"  # no Hello yet
    SERVING = "serving"  # a reader or a producer: replies only, no batches
    REPLAYING = "replaying"  # a resuming relay: the log goes out, live batches are held back
    LIVE = "live"  # a relay: live batches go out as they come
    CLOSED = "closed"  # nothing more goes out


class Event(enum.Enum):
    """What moves a connection from one phase to another."""

    WELCOMED = "welcomed"
    RELAY_WELCOMED = "relay_welcomed"
    RELAY_RESUMES = "relay_resumes"
    HELD_BACK_RELEASED = "held_back_released"
    HELD_BACK_FULL = "held_back_full"
    REFUSED = "refused"  # a bad handshake, or too many bad frames in a row
    HELLO_OVERDUE = "hello_overdue"
    ENDED = "ended"


#: (phase, event) -> the next phase; a pair not listed is a bug of ours (``_move`` raises).
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (Phase.HELLO, Event.WELCOMED): Phase.SERVING,
    (Phase.HELLO, Event.RELAY_WELCOMED): Phase.LIVE,
    (Phase.HELLO, Event.RELAY_RESUMES): Phase.REPLAYING,
    (Phase.HELLO, Event.HELLO_OVERDUE): Phase.CLOSED,
    (Phase.REPLAYING, Event.HELD_BACK_RELEASED): Phase.LIVE,
    (Phase.REPLAYING, Event.HELD_BACK_FULL): Phase.CLOSED,
    **{(phase, Event.REFUSED): Phase.CLOSED for phase in Phase},
    **{(phase, Event.ENDED): Phase.CLOSED for phase in Phase},
}


@dataclass(frozen=True)
class Delivery:
    """A live batch for one relay, encoded once on the pipeline's thread.

    Attributes:
        dataset, seq: the batch's stream position (its epoch is the stream's current one).
        snapshots: whether it carries snapshots of freshly acquired primitives.
        data: the encoded ``Batch``.
    """

    dataset: str
    seq: int
    snapshots: bool
    data: bytes

    @classmethod
    def of(cls, batch: Batch) -> Delivery:
        """Encode ``batch`` for sending."""
        return cls(batch.dataset, batch.seq, bool(batch.snapshots), codec.encode(batch))


@dataclass(frozen=True)
class Send:
    """Send ``frame`` now (queued behind what is already waiting)."""

    frame: Frame


@dataclass(frozen=True)
class Forward:
    """Send an encoded live batch now."""

    data: bytes


@dataclass(frozen=True)
class Start:
    """Start blocking work for a request; its answer, or an ``Error`` with ``ref=req``, goes
    out when it is done."""

    request: ReadState | Publish | Curious


@dataclass(frozen=True)
class Replay:
    """Replay the log to a resuming relay: for each dataset in order, the batches after its
    seq (``replayed`` or ``replay_failed``), then the held-back batches (``next_held_back``)."""

    resume: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Welcomed:
    """The handshake is done: stop the hello timer; a relay's batches go to this session."""

    relay: int | None


@dataclass(frozen=True)
class Close:
    """Close the connection: ``reason`` None ends it once what is queued went out (a refused
    handshake, a peer speaking another protocol); a reason closes it as a slow consumer."""

    reason: str | None = None


Action = Send | Forward | Start | Replay | Welcomed | Close


class PublisherSession:
    """One connection's session: a relay's, a reader's or a producer's.

    Attributes:
        phase: where the connection is (``Phase``).
        relay: the relay's id in the registry, once a relay is welcomed.
        name: the name the peer gave in its ``Hello`` ("unnamed" if none, or none yet).
    """

    def __init__(
        self,
        registry: Registry,
        check: Callable[[str, View], View],
        catalog: Callable[[], list[DatasetInfo]],
        authenticate: Callable[[Hello], object] | None = None,
    ) -> None:
        """Args:
        registry: relays and the primitives they hold (shared with the pipeline).
        check: the primitive to hold for a view of a dataset (raises InvalidView).
        catalog: the datasets served, sent to every peer after its ``Welcome``.
        authenticate: checks a ``Hello``'s token for its role (``wire.handshake``); None: no
            authentication.
        """
        self._registry = registry
        self._check = check
        self._catalog = catalog
        self._handshake = AcceptingSession(
            codec.to_publisher(), "fanout-publisher", ROLES, authenticate=authenticate
        )
        self.phase = Phase.HELLO
        self.relay: int | None = None
        self.name = "unnamed"
        #: dataset -> the last seq the relay has of it (rule 5).
        self._last_seq: dict[str, int] = {}
        self._held_back: deque[Delivery] = deque()

    @property
    def grant(self) -> object:
        """What the peer's token grants, once admitted (None before, or without
        authentication)."""
        return self._handshake.grant

    def _move(self, event: Event) -> None:
        following = TRANSITIONS.get((self.phase, event))
        if following is None:
            raise RuntimeError(f"a connection in phase {self.phase.value} cannot {event.value}")
        self.phase = following

    # -- what the peer sends -----------------------------------------------------------------

    def receive(self, data: bytes | str) -> list[Action]:
        """Take one WebSocket message from the peer; returns what to do about it, in order."""
        if self.phase is Phase.CLOSED:
            return []
        outcome = self._handshake.receive(data)
        actions: list[Action] = []
        if outcome.reply is not None:
            actions.append(Send(outcome.reply))
        if isinstance(outcome.reply, Welcome) and self._handshake.hello is not None:
            actions += self._welcomed(self._handshake.hello)
        if outcome.close:
            self._move(Event.REFUSED)
            return [*actions, Close()]
        if outcome.deliver is not None:
            actions += self._dispatch(outcome.deliver)
        return actions

    def hello_overdue(self, timeout: float) -> list[Action]:
        """No ``Hello`` came within ``timeout`` seconds (rule 1)."""
        if self.phase is not Phase.HELLO:
            return []
        self._move(Event.HELLO_OVERDUE)
        late = f"no hello within {timeout:g} s; closing"
        return [Send(Error(code="handshake", message=late)), Close()]

    def _welcomed(self, hello: Hello) -> list[Action]:
        actions: list[Action] = [Send(Catalog(datasets=self._catalog()))]
        self.name = hello.name or self.name
        if hello.role != "relay":
            self._move(Event.WELCOMED)
            return [*actions, Welcomed(None)]
        self.relay = self._registry.add_relay(hello.name)
        actions.append(Welcomed(self.relay))
        if not hello.resume:
            self._move(Event.RELAY_WELCOMED)
            return actions
        self._move(Event.RELAY_RESUMES)
        self._last_seq = {dataset: seq for dataset, (_, seq) in hello.resume.items()}
        return [*actions, Replay(dict(hello.resume))]

    def _dispatch(self, frame: ToPublisher) -> list[Action]:
        """A frame after the handshake (rules 2 and 6)."""
        relay = self.relay
        refusal: Error | None = None
        match frame:
            case Acquire(prim=prim, dataset=dataset, view=view) if relay is not None:
                refusal = self._refusal(prim, self._acquire, relay, prim, dataset, view)
            case Release(prim=prim) if relay is not None:
                refusal = self._refusal(prim, self._registry.release, relay, prim)
            case Horizon(dataset=dataset, epoch=epoch, seq=seq) if relay is not None:
                self._registry.hold(relay, dataset, epoch, seq)
            case LiveWrites(dataset=dataset, wanted=live) if relay is not None:
                names = [info.name for info in self._catalog()]
                if dataset in names:
                    self._registry.want_live(relay, dataset, live)
                else:
                    message = f"unknown dataset {dataset!r} (serving: {', '.join(names)})"
                    refusal = Error("invalid_view", message)
            case ReadState() if self._role() in ("relay", "reader"):
                return [Start(frame)]
            case Publish() if self._role() in ("producer", "relay"):
                # A relay forwards its subscribers' writes (relay.forwarding), each checked
                # there for a token granting the producer role.
                return [Start(frame)]
            case ReadState() | Publish():
                # Each role reads or writes only what it is for (a token grants a role).
                wanted = "a relay or a reader" if isinstance(frame, ReadState) else "a producer"
                message = f"{type(frame).__name__.lower()} is for {wanted}, not a {self._role()}"
                refusal = Error("role", message, ref=frame.req)
            case Curious() if relay is not None:
                return [Start(frame)]
            case Acquire() | Release():
                refusal = Error("role", "only relays hold primitives")
            case _:
                message = f"{type(frame).__name__.lower()} is not accepted by the publisher"
                refusal = Error("protocol", message)
        return [] if refusal is None else [Send(refusal)]

    def _role(self) -> str:
        hello = self._handshake.hello
        return "" if hello is None else hello.role

    def _acquire(self, relay: int, prim: int, dataset: str, view: View) -> None:
        self._registry.acquire(relay, prim, dataset, self._check(dataset, view))

    def _refusal(self, ref: int, action: Callable[..., None], *args: object) -> Error | None:
        """Apply ``action``; a refusal is the ``Error`` naming ``ref`` to answer with."""
        try:
            action(*args)
        except FanoutError as exc:
            return Error(exc.code, str(exc), ref=ref)
        return None

    # -- live batches ------------------------------------------------------------------------

    def offer(self, delivery: Delivery) -> list[Action]:
        """A live batch for this relay (rules 4 and 5)."""
        if self.phase is Phase.LIVE:
            return [Forward(delivery.data)] if self._admit(delivery) else []
        if self.phase is not Phase.REPLAYING:
            return []
        if len(self._held_back) < HELD_BACK_LIMIT:
            self._held_back.append(delivery)
            return []
        waiting = len(self._held_back)
        self._move(Event.HELD_BACK_FULL)
        self._held_back.clear()
        return [Close(f"slow consumer: {waiting} batches waiting behind a replay")]

    def _admit(self, batch: Delivery | Batch) -> bool:
        """Whether the relay takes ``batch`` (rule 5); if so, it is the last one it has."""
        last = self._last_seq.get(batch.dataset)
        snapshots = bool(batch.snapshots)
        if last is not None and (batch.seq < last or (batch.seq == last and not snapshots)):
            return False
        self._last_seq[batch.dataset] = batch.seq
        return True

    # -- the replay (``Replay``) ---------------------------------------------------------------

    def replayed(self, batches: Sequence[Batch]) -> list[Batch]:
        """The log's batches of one dataset after the relay's seq were read: those to send, in
        order (rule 5 drops none of a well-formed replay)."""
        if self.phase is not Phase.REPLAYING:
            return []
        return [batch for batch in batches if self._admit(batch)]

    def replay_failed(self, dataset: str, after: int, reason: str) -> Error | None:
        """The log could not be replayed for ``dataset`` (rule 3): the ``Error`` to send, if
        the connection is still replaying."""
        if self.phase is not Phase.REPLAYING:
            return None
        self._last_seq.pop(dataset, None)  # its seqs say nothing about the stream's now
        message = f"cannot replay {dataset} after seq {after}: {reason}; resync from snapshots"
        return Error("resync", message)

    def next_held_back(self) -> bytes | None:
        """The next held-back batch to send after the replay; None once there is none left,
        at which moment the relay is live: batches offered from then on go out at once."""
        while self.phase is Phase.REPLAYING and self._held_back:
            delivery = self._held_back.popleft()
            if self._admit(delivery):
                return delivery.data
        if self.phase is Phase.REPLAYING:
            self._move(Event.HELD_BACK_RELEASED)
        return None

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """The connection ended: a relay's primitives are released."""
        if self.relay is not None:
            self._registry.drop_relay(self.relay)
        self._held_back.clear()
        self._move(Event.ENDED)
