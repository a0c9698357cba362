"""The relay's core, sans I/O: subscriptions, coverage planning, scheduling and serving.

Frames, the clock and budgets in, frames out (``relaycore.RelayCore``); no sockets, no asyncio,
no threads. ``lifecycle`` is a subscription's state machine, ``planner`` what to hold upstream,
``scheduler`` and ``serving`` who is pushed next, ``every`` and ``changesets`` the ``every`` mode.
docs/architecture.md says how the parts fit.
"""
