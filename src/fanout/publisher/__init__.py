"""The publisher: a Spark Structured Streaming pipeline holding the authoritative data, and the
control plane through which relays acquire primitives and receive their batches."""
