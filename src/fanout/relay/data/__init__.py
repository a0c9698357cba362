"""The relay's copy of the data, sans I/O: buffers of rows, and pushes cut from them.

``buffers`` is the double-buffered copy of what the upstream primitives cover, ``intake`` takes
the publisher's batches into it, ``pushes``, ``batchcut`` and ``rows`` cut a subscription's push,
``tables`` runs SQL views in DuckDB. The compiled kernels beside them are in ``relay.kernels``.
"""
