"""Snoopy object caches on a NATS subject bus (Liebig et al.; ``docs/caches.md``).

``cache.core`` decides (versions, collections, eviction, fragments) without I/O;
``cache.client`` is the asyncio shell on NATS and PostgreSQL (the ``[cache]`` extra).
"""
