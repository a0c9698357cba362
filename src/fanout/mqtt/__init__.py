"""The relay's MQTT front end: MQTT 3.1.1 and 5.0 clients publish and subscribe to topics.

``packets``, ``decoding`` and ``encoding`` are the codec; ``sessions`` a client's session;
``broker`` the sans-I/O broker (packets in, ``actions`` out); ``listener`` its asyncio shell on
the relay's ``--mqtt-port``; ``ingest`` and ``producer`` keep retained messages in a topic
dataset; ``matchtable`` is the shared match table in Redis Cluster and ``federation`` the
relays' forwarding over it; ``setup`` makes these from a ``RelayConfig``. See docs/mqtt.md.
"""
