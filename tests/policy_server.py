"""A live :class:`~jaxsrl.workers.inference.policy.PolicyWorker` for tests that talk to it
over its socket: its thread started, a DEALER connected, both stopped after."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import zmq


@contextlib.contextmanager
def served(worker, join_s: float = 10.0) -> Iterator[zmq.Socket]:
    """Run ``worker`` in a daemon thread until the block ends; yields a DEALER socket
    connected to its address (closed after, the worker stopped and joined)."""
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    worker.ready.wait()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker.address)
    try:
        yield sock
    finally:
        sock.close()
        worker.stop.set()
        thread.join(join_s)
