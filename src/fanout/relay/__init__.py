"""The relay (the founding documents' intermediary process): serves many subscribers from one
upstream feed, sharing data between overlapping views so the publisher never sees them."""
