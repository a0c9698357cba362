"""fanout's testing package: what its own tests and benchmarks use, shipped with the library so
that users can test their code against real fanout peers too (as ``pyspark.testing`` or
``trio.testing`` are).

Each module is small and imports only what it needs: importing one pulls in no Spark, and DuckDB
or a PostgreSQL driver only where the module works with them; :mod:`fanout.testing.strategies`
alone needs Hypothesis (a dev dependency), and this package imports none of them. What each
module holds: docs/architecture.md, "Tests and benchmarks".
"""
