"""The relay's WebSocket front end: subscribers (and relays below) speaking fanout's own
protocol (docs/protocol.md) on the relay's port, their frames fed to the relay through its API
(``relay.api``). ``server`` is the front end; the HTTP front end hands it the port's upgrades.
"""
