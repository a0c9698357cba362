"""Spark streaming sources of the publisher's datasets."""
