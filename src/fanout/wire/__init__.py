"""The wire protocol: tagged msgspec structs, msgpack-encoded, one WebSocket binary message each.

``messages`` defines every frame, ``columns`` the columnar payloads inside them, ``codec`` the
encoders/decoders per direction and ``session`` the sans-I/O handshake state machine.
"""
