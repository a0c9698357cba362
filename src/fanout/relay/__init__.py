"""The relay (the founding documents' intermediary process): serves many subscribers from one
upstream feed, sharing data between overlapping views so the publisher never sees them.

``core`` and ``data`` are sans I/O, ``kinds`` holds one plug-in per dataset kind, ``kernels``
the compiled cutting, ``shell`` the asyncio side and the composition root. The front ends
(``fanout.http``, ``fanout.mqtt``) and the many-relay parts (``fanout.cluster``,
``fanout.tiers``) are sibling packages that plug into it.
"""
