"""Many relays as one intermediary system: the shared map of responsibility (CA 3197003 [0111],
[0116], Fig. 9).

``responsibility`` is the pure map (parts of datasets, rendezvous owners), ``redirects`` the pure
policy for subscriptions a relay is not responsible for, ``registry`` the shell keeping the
members in Redis Cluster with leases. docs/cluster.md says how to run it.
"""
