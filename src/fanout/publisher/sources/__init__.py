"""Spark streaming sources of the publisher's datasets (``publisher.streams`` opens them)."""
