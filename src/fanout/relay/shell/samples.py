"""What a relay says on ``GET /metrics`` (``fanout.metrics``): its counters, named and explained.

Every counter of ``RelayCore.stats()`` has an entry here (a test holds them to it), plus what only
the server knows: connections, bytes written, slow consumers closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from fanout.metrics import Sample

Kind = Literal["counter", "gauge"]

#: ``RelayCore.stats()`` name -> (kind, help).
CORE: dict[str, tuple[Kind, str]] = {
    "subscriptions": ("gauge", "Subscriptions held now."),
    "primitives": ("gauge", "Upstream primitives held at the publisher now."),
    "primitives_acquired": (
        "counter",
        "Upstream primitives acquired (each one a snapshot the publisher cuts).",
    ),
    "rows": ("gauge", "Rows in the active state buffers now."),
    "batches": ("counter", "Batches taken from the publisher."),
    "swaps": ("counter", "State buffer swaps (a new tick's state made active)."),
    "catch_up_replays": ("counter", "Inert buffers brought up to date by replaying a batch."),
    "catch_up_copies": ("counter", "Inert buffers brought up to date by copying the active one."),
    "pushes": ("counter", "Pushes sent to subscribers."),
    "no_updates": ("counter", "No-update messages sent to subscribers."),
    "curiosity_asked": (
        "counter",
        "Curiosity requests sent upstream for this relay's every-mode subscriptions.",
    ),
    "curiosity_asked_seqs": ("counter", "Seqs those curiosity requests asked for."),
    "bodies_cut": ("counter", "Push bodies computed."),
    "bodies_shared": ("counter", "Pushes that reused a body computed for another subscription."),
    "every_steps_computed": ("counter", "Mode-every deltas computed."),
    "every_steps_shared": ("counter", "Mode-every pushes that reused another's delta."),
    "ticks_coalesced": (
        "gauge",
        "Ticks folded into later pushes (latest-value coalescing), summed over current"
        " subscriptions.",
    ),
    "pushes_deferred": (
        "gauge",
        "Pushes put off because the connection was still writing, summed over current"
        " subscriptions.",
    ),
    "pending": ("gauge", "Subscriptions waiting in the scheduler's queue now."),
    "parked": ("gauge", "Subscriptions parked on coverage or a busy connection now."),
    "ended_entity_not_held": (
        "counter",
        "Subscriptions ended because their reference entity was not held.",
    ),
    "primitives_pending": (
        "gauge",
        "Upstream primitives acquired whose snapshot has not come yet (their views wait).",
    ),
    "held": (
        "gauge",
        "Subscriptions held until the relay knows their dataset (no catalog from upstream yet).",
    ),
    "held_refused": (
        "counter",
        "Held subscriptions refused: no room to hold more, or no catalog within the wait.",
    ),
    "sql_syncs": ("counter", "Syncs of upstream rows into the relay's DuckDB."),
    "sql_evaluations": ("counter", "SQL view evaluations."),
    "sql_results_shared": ("counter", "SQL pushes that reused another identical query's result."),
    "sql_query_seconds": (
        "counter",
        "Seconds the event loop spent running subscribers' SQL (failed queries included).",
    ),
    "sql_pushes_put_off": (
        "counter",
        "SQL pushes put off because their connection had spent its share of SQL time.",
    ),
    "transduced": ("gauge", "Subscriptions whose pushes go through a transducer."),
    "transducers_stopped": (
        "counter",
        "Transducers stopped: over their budget, or failed (their subscription ended).",
    ),
    # Writes made through this relay, shown at once (``relay.core.livepath``).
    "live_writes": (
        "counter",
        "Writes to datasets with live views, made through this relay or passed from upstream.",
    ),
    "live_invalid": ("counter", "Of those, not shown at once: not whole rows of the dataset."),
    "live_skipped": ("counter", "Of those, not shown at once: too many writes pending."),
    "live_passed": ("counter", "Writes made elsewhere, passed from upstream and shown here."),
    "live_late": (
        "counter",
        "Writes passed from upstream not shown: a view here watches their dataset, and this"
        " relay's state carried them already.",
    ),
    "live_pending": ("gauge", "Writes shown at once and not settled by the publisher yet."),
    "live_unsettled": (
        "gauge",
        "A worker's: writes its leader passed before the publisher answered, not answered yet.",
    ),
    "live_shown": ("counter", "Rows pushed provisionally, before the publisher confirmed them."),
    "live_confirmed": ("counter", "Writes shown at once, then confirmed by the stream."),
    "live_refused": ("counter", "Writes shown at once that the publisher refused."),
    "live_withdrawn": (
        "counter",
        "Writes shown at once but not confirmed in time, or their link lost before an answer.",
    ),
    "live_corrected": ("counter", "Rows pushed to undo or correct what a subscriber was shown."),
    "live_deduplicated": (
        "counter",
        "Rows a confirmed push left out: the subscriber held them from the live path already.",
    ),
    "topic_passes": ("counter", "Passes of changed topics through the topic index."),
    "topic_rows_not_topics": (
        "counter",
        "Rows met in those passes whose topic is no MQTT topic name (matched by no filter).",
    ),
    # Relays below this one (``fanout.tiers``).
    "relays_below": ("gauge", "Relays connected below this one (their upstream is this relay)."),
    "below_primitives": ("gauge", "Primitives the relays below hold here now."),
    "below_batches": ("counter", "Batches forwarded to relays below."),
    "upstream_datasets_stopped": (
        "gauge",
        "Datasets whose streaming query upstream stopped and restarts (their views wait).",
    ),
    "forwarded_primitives": (
        "gauge",
        "Primitives acquired now from the relays responsible for their parts (forward policy).",
    ),
    "forwarded": ("counter", "Primitives acquired from another relay of the map."),
    "assembled": ("counter", "Seqs assembled from the pieces of more than one upstream."),
    "peer_links": ("gauge", "Links open now to relays of the map this relay forwards to."),
    "below_snapshots": ("counter", "Primitives of relays below whose snapshot was sent."),
    "below_curiosity_asked": ("counter", "Curiosity requests from relays below."),
    "below_curiosity_passed": (
        "counter",
        "Curiosity requests passed upstream for relays below (not answerable from the window).",
    ),
    "below_curiosity_passed_seqs": (
        "counter",
        "Seqs asked upstream for relays below: each once while in flight, however many ask.",
    ),
    "below_curiosity_merged": (
        "counter",
        "Curiosity requests of relays below needing nothing new upstream (seqs in flight).",
    ),
    "below_curiosity_answered": (
        "counter",
        "Curiosity requests of relays below answered from this relay's window.",
    ),
    "below_resyncs": (
        "counter",
        "Resync frames sent to relays below: primitives of theirs wait for snapshots again.",
    ),
    "resyncs_taken": (
        "counter",
        "Resync frames taken from upstream: primitives here wait for snapshots again.",
    ),
}


def relay_samples(
    core: Mapping[str, float],
    *,
    connections: int,
    upstream_connected: bool,
    frames_sent: int,
    bytes_sent: int,
    slow_closed: int,
    reads_throttled: int,
    refused: int,
    ungreeted: int = 0,
    frames_refused: int = 0,
    frames_received: int = 0,
    closed_bad: int = 0,
    hello_timeouts: int = 0,
) -> list[Sample]:
    """The relay's samples: ``core`` (``RelayCore.stats()``) and the server's own figures.

    Raises:
        KeyError: a core counter has no entry in ``CORE``.
    """
    return [
        *(Sample(f"relay_{name}", *CORE[name], value=value) for name, value in core.items()),
        Sample("relay_connections", "gauge", "Subscriber connections open now.", connections),
        Sample(
            "relay_upstream_connected",
            "gauge",
            "1 while connected to the publisher.",
            int(upstream_connected),
        ),
        Sample("relay_frames_sent", "counter", "Frames written to subscribers.", frames_sent),
        Sample(
            "relay_bytes_sent",
            "counter",
            "Bytes of frames written to subscribers (WebSocket framing not counted).",
            bytes_sent,
        ),
        Sample(
            "relay_slow_consumers_closed",
            "counter",
            "Subscriber connections closed as slow consumers.",
            slow_closed,
        ),
        Sample(
            "relay_reads_throttled",
            "counter",
            "Times a subscriber connection sent frames faster than read_rate and was not read"
            " for a while.",
            reads_throttled,
        ),
        Sample(
            "relay_connections_refused",
            "counter",
            "Subscriber connections refused at their Hello: the relay served max_connections.",
            refused,
        ),
        Sample(
            "relay_connections_ungreeted",
            "gauge",
            "Connections open now that have not said Hello yet (closed after hello_timeout).",
            ungreeted,
        ),
        Sample(
            "relay_frames_received",
            "counter",
            "Frames read from subscriber connections, well-formed or not.",
            frames_received,
        ),
        Sample(
            "relay_frames_refused",
            "counter",
            "Frames from subscriber connections answered with an Error: malformed, or not"
            " fitting the conversation (a refused view is not counted here).",
            frames_refused,
        ),
        Sample(
            "relay_connections_closed_bad_input",
            "counter",
            "Connections closed for what they sent: a refused handshake, too many bad frames in"
            " a row, or a frame over the size limit.",
            closed_bad,
        ),
        Sample(
            "relay_hello_timeouts",
            "counter",
            "Connections closed for sending no Hello within hello_timeout.",
            hello_timeouts,
        ),
    ]
