"""``fanout mount``: an ``objects`` dataset as a file system, where ``ls``, ``cat`` and ``echo``
publish and subscribe (US 9,026,567, QNX PPS; docs/objects.md is the user's guide). Rules:

1. Directories are directories, objects are files, ``dir/.all`` every object of ``dir``. Reads
   come from the relay; writes go through it (or ``--publisher``) and return once durable.
2. Open options follow ``?`` as in PPS. Without ``wait`` or ``delta`` a file reads as one full
   version; with them as a stream, a read with nothing new blocking (``wait``) or ending.
3. A ``write`` is whole lines of PPS text applied all or nothing (else ``EINVAL``, logged).
4. ``mkdir``, ``rmdir`` (empty), ``rm``, and creating a file (``?nopersist``: non-persistent).
5. While the relay is away, reads and lookups fail with ``EIO``; later operations reconnect.
6. ``SIGINT`` and ``SIGTERM`` unmount.
7. ``poll``/``select``: a stream (``wait``, ``delta``, ``deltadir``) is readable when a read
   would return at once. 8. Closing a ``critical`` writer deletes the non-persistent attributes.
FUSE callbacks run on libfuse's threads; network steps on one asyncio loop (:class:`Link`).
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
