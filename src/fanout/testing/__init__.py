"""fanout's testing package: what its own tests and benchmarks use, shipped with the library so
that users can test their code against real fanout peers too (as ``pyspark.testing`` or
``trio.testing`` are).

Each module is small and imports only what it needs: importing one pulls in no Spark, and DuckDB
or a PostgreSQL driver only where the module works with them:

- :mod:`fanout.testing.wait`: ``eventually()``, polling a condition until it holds or failing
  with what was last seen.
- :mod:`fanout.testing.ports`: ``free_port()``, a loopback port nobody listens on.
- :mod:`fanout.testing.postgres`: ``throwaway_postgres()``, a PostgreSQL server in a temporary
  folder on a free loopback port.
- :mod:`fanout.testing.nats`: ``throwaway_nats()``, a NATS server on a free loopback port that
  a test can kill and start again.
- :mod:`fanout.testing.publisher`: ``ScriptedPublisher``, a publisher speaking the real protocol
  to real relays, sending the batches its caller makes (no Spark).
- :mod:`fanout.testing.relays`: real relays on loopback, in this event loop or in a process of
  their own.
- :mod:`fanout.testing.catalog`, :mod:`fanout.testing.batches` and
  :mod:`fanout.testing.relaycore`: catalog entries, batches and a relay core ready for frames,
  as tests build them.
- :mod:`fanout.testing.memory`: ``memory_pair()``, two connected ends carrying WebSocket
  messages both ways, for whole conversations without sockets.
- :mod:`fanout.testing.strategies`: Hypothesis strategies for views (needs Hypothesis, a dev
  dependency: not imported by this package); :mod:`fanout.testing.oracle`: 2-D regions'
  membership by plain comparisons, the brute-force oracle they are tested against.
- :mod:`fanout.testing.frames`: ``head()``, a frame's header decoded and the rest skipped.
- :mod:`fanout.testing.audit`: ``audit()``, an ``every`` subscriber's updates replayed against
  the publisher's log.
- :mod:`fanout.testing.clusterview`: relays in a map of responsibility seen from outside: their
  metrics, a split's assignments in Redis, ``Follower`` (an ``every`` subscriber kept across
  moves and relays' deaths) and its audit.
- :mod:`fanout.testing.proxy`: a loopback TCP proxy whose connections a test cuts (a link
  between two processes broken while both run).
- :mod:`fanout.testing.httpstream`: an NDJSON ``/v1/subscribe`` client that follows a stream
  whose part moved.
- :mod:`fanout.testing.world` and :mod:`fanout.testing.sparkstate`: the relay benchmarks'
  moving entities, publisher and routes; Spark's stateful stream alone, for the publisher's;
  :mod:`fanout.testing.sharing`: the sharing benchmark's set-up.
- :mod:`fanout.testing.exact`: ``exact``, a dataset kind for tests (topic names matched
  exactly) and an example of one: its registration, its relay and publisher parts.
- :mod:`fanout.testing.cpu`: CPU time of a process, a process tree or the whole machine.
- :mod:`fanout.testing.machine` and :mod:`fanout.testing.calibration`: what every benchmark
  records about the machine it ran on, and a fixed workload timed in the same run.
"""
