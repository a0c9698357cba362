"""Relay tiers: a relay serving the relays below it as the publisher serves relays.

``below`` is the sans-I/O part (``Relays``: who is below, what each holds, what each is sent),
``cut`` the pure cutting of one seq's change and of snapshots for one relay below, ``link`` the
asyncio shell of one connection from a relay below. docs/cluster.md says how to run tiers.
"""
