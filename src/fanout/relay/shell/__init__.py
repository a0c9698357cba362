"""The relay's asyncio shell: sockets, timers, tasks and threads around the sans-I/O core.

``server`` is the composition root (one ``TaskGroup`` owning every task, the front ends started
from it), ``upstreamlink`` the link to the publisher, ``writer`` the thread that writes batches,
``pump`` the timers that hand out due pushes, ``clients`` the downstream connections.
"""
