"""The relay's HTTP front end: the streaming API (Server-Sent Events, NDJSON), plain JSON
answers, and the live viewer, served on the relay's WebSocket port.

``api`` is the pure side (requests in, subscriptions and JSON events out), ``server`` its
asyncio side. docs/http.md is the user's guide.
"""
