"""The ``fanout`` command: one module per group of subcommands, ``main`` dispatching to them.

Subcommands import their parts lazily, so ``fanout --help`` stays fast and needs no Spark.
docs/cli.md lists every command and option.
"""
