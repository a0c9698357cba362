"""The subscriber library.

async with connect(url) as sub:
    view = await sub.subscribe(Box(...))
"""

from fanout.client.routing import rank
from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, Update, connect
from fanout.wire.handshake import HandshakeRefused

__all__ = [
    "HandshakeRefused",
    "LiveView",
    "Subscriber",
    "SubscriptionError",
    "Update",
    "connect",
    "rank",
]
