"""A view's rows published as a dataset: a transduced view's output becomes a dataset other relays
(and their transducers) subscribe to, over the same publish/subscribe mechanism (CA 3197003
[0128]; docs/transducers.md, "Publishing a transducer's output as a dataset").

:func:`republish` follows a view and writes to an ``ingest`` dataset of the publisher, through the
view's own relay connection, what changed in the view's rows since its last write: rows new or
changed upserted, rows gone deleted. It compares the rows held, not the updates, so an update a
``latest`` view dropped (its buffer was full) loses nothing.
"""

from __future__ import annotations

from typing import Any

from fanout.client.liveview import LiveView


async def republish(view: LiveView, dataset: str) -> None:
    """Write ``view``'s rows into ingest dataset ``dataset`` as they change, until the view ends.

    The dataset's key and columns must be the view's (its ``key`` and ``columns``: for a
    transduced view, the transducer's output), declared in the publisher's ``fanout.toml``.

    Raises:
        SubscriptionError: the view ended with an error, or the publisher refused a write
            (``bad_request``: the rows do not fit the dataset's schema, ...).
    """
    written: dict[Any, dict[str, Any]] = {}
    async for _ in view:
        if view.state.pending:
            continue  # more updates at hand: one write for all of them
        rows = view.rows
        changed = [dict(row) for key, row in rows.items() if written.get(key) != row]
        gone = [key for key in written if key not in rows]
        if changed or gone:
            await view.subscriber.publish(dataset, changed, gone, key=view.key)
            written = {key: dict(row) for key, row in rows.items()}
