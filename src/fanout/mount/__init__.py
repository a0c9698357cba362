"""``fanout mount``: an ``objects`` dataset as a file system, where ``ls``, ``cat`` and ``echo``
publish and subscribe (US 9,026,567, QNX PPS: objects are files and the file-system API is the
interface for publishers and subscribers alike; docs/objects.md).

Rules of the mount:

1. Directories are directories, objects are files, ``dir/.all`` is every object of ``dir``.
   Reads come from the relay. Writes go through the relay, which forwards them to the
   publisher, or with ``--publisher`` to the publisher directly; either way a write returns once
   durable at the publisher.
2. Open options follow ``?`` in the name, as in PPS: ``cat 'obj?delta,wait'``,
   ``cat 'dir/.all?delta,wait,f=speed>50'``. Without ``wait`` or ``delta`` a file reads like a
   plain file: one full version of the object, then end of file. With ``wait`` or ``delta`` it
   reads like a stream (``tail -f``): each read gives what the PPS mode says
   (``views.objects.reading``) and a read with nothing new blocks (``wait``) or ends (no
   ``wait``).
3. Each ``write`` is one or more whole lines of PPS text (``views.objects.text``) applied to the
   object all or nothing. A malformed line, an unknown option, a quality above 9 or a bad path
   fails that ``write`` with ``EINVAL`` and a logged reason; the mount and its other users go on.
   Opening with ``O_TRUNC`` (``>``) truncates nothing: an object is its attributes.
4. ``mkdir`` makes a directory, ``rmdir`` removes an empty one, ``rm`` deletes an object,
   creating a file (``touch``, ``>>``) creates an empty object; ``obj?nopersist`` creates a
   non-persistent one.
5. While the relay cannot be reached, reads and lookups fail with ``EIO``; each later operation
   tries to reconnect, and open files resubscribe (a delta reader starts again with a full
   read). Writes sent to the publisher directly (``--publisher``) need only the publisher.
6. ``SIGINT`` and ``SIGTERM`` unmount (libfuse's handlers), after which the connections close.

The FUSE callbacks run on libfuse's threads; they hand every network step to one asyncio loop on
a thread of its own (:class:`Link`) and wait for its answer.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading

import mfusepy as fuse  # type: ignore[import-untyped]  # ships no type hints

from fanout.mount.files import ObjectsFS
from fanout.mount.link import Link

__all__ = ["MAX_THREADS", "mount"]

log = logging.getLogger(__name__)

#: libfuse worker threads at most: every blocked ``wait`` reader holds one.
MAX_THREADS = 256


def mount(relay: str, publisher: str | None, dataset: str, mountpoint: str) -> int:
    """Mount ``dataset`` at ``mountpoint`` and serve it until unmounted or signalled (rule 6).

    Returns:
        0 once unmounted.
    """
    mountpoint = os.path.abspath(mountpoint)  # libfuse moves to '/' once mounted
    link = Link(relay, publisher, dataset)
    operations = ObjectsFS(link)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            fuse.FUSE(
                operations,
                mountpoint,
                raw_fi=True,
                foreground=True,
                fsname=f"fanout:{dataset}",
                max_threads=MAX_THREADS,
                intr=True,  # a signalled reader's blocked read is interrupted (fuse_interrupted)
            )
        except BaseException as error:  # handed to the main thread, which raises it
            failure.append(error)

    # libfuse installs its own SIGINT/SIGTERM handlers only where none is set; these are set,
    # so the main thread hears the signal, ends blocked reads and unmounts (rule 6).
    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: unmounting %s", signum, mountpoint)
        operations.stopping.set()
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    # libfuse interrupts a request's thread with SIGUSR1 (``intr``) but, configured through
    # mfusepy's init, installs no handler for it: without one it would end the process.
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda _signum, _frame: None)
    server = threading.Thread(target=serve, name="fuse", daemon=True)
    try:
        server.start()
        while server.is_alive():
            server.join(timeout=0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        operations.stopping.set()
        link.close()
    if failure and not isinstance(failure[0], RuntimeError):
        raise failure[0]
    if failure:
        log.info("unmounted %s (libfuse said %s)", mountpoint, failure[0])
    return 0
