"""fanout."""
