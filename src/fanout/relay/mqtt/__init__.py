"""MQTT 3.1.1 and 5.0 on a relay: stock MQTT clients publish and subscribe to topics.

``packets`` is the codec, ``sessions`` a client's session, ``broker`` the sans-I/O broker (packets
in, packets out), ``listener`` its asyncio shell on the relay's ``--mqtt-port``. See docs/mqtt.md.
"""
