"""The lifecycle every worker shares: one base class, so the launcher watches any worker
(trainer, policy worker, remote-server supervisor, parameter threads, ...) the same way.

A worker runs its loop in :meth:`Worker.run` (a thread's target, or the caller's own
thread). The launcher reads:

* ``ready`` (``threading.Event``): set once the worker's sockets are bound (``address``
  is then known) or it failed before that;
* ``serving``: set once it does its job (e.g. after compiling); cleared again by
  workers that can stop serving (a supervisor whose servers restart);
* ``heartbeat``: ``time.monotonic()`` of the loop's last turn (hang detection);
* ``error``: the exception that ended :meth:`run`, or ``None``;
* ``address``: the address clients connect to, or ``None`` for workers without a
  server socket;

and sets ``stop`` to end the loop. No JAX here: actors import this.
"""

from __future__ import annotations

import logging
import threading
import time


class Worker:
    """Base of every worker: the lifecycle fields above and a :meth:`run` that keeps the
    exception that ended the worker's loop.

    Subclasses implement :meth:`_run` (the loop: return when ``stop`` is set) and call
    :meth:`beat` on each turn and :meth:`start_serving` once warmed up.

    Args:
      name: the worker's name in logs and errors (``policy[0]``, ``trainer``, ...).

    Class attributes:
      reraise: whether :meth:`run` re-raises the loop's exception after keeping it (the
        thread then reports it on stderr); ``False`` for helper threads whose owner
        reports the error instead.
      log: where workers with ``reraise = False`` log the exception (``None``: nowhere).
    """

    reraise = True
    log: logging.Logger | None = None

    def __init__(self, name: str):
        self.name = name
        self.address: str | None = None
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.serving = threading.Event()
        self.error: BaseException | None = None
        self.heartbeat = time.monotonic()

    def _run(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def run(self, *args, **kwargs) -> None:
        """Run the worker's loop (``_run(*args, **kwargs)``) until ``stop`` is set (or it
        fails).

        Raises:
          BaseException: whatever ended the loop, after keeping it in ``error`` and
            setting ``ready`` (unless ``reraise`` is False: then it is only kept). An
            error whose class has ``one_line = True`` (its message says all, e.g. a full
            disk) is kept and surfaced by the owner without a traceback.
        """
        try:
            self._run(*args, **kwargs)
        except BaseException as exc:  # surfaced by the owner, which names this worker
            self.error = exc
            self.ready.set()
            if getattr(exc, "one_line", False):
                return
            if self.log is not None:
                self.log.exception("%s stopped", self.name)
            if self.reraise:
                raise

    def beat(self) -> None:
        """Record a turn of the loop (``heartbeat`` = now)."""
        self.heartbeat = time.monotonic()

    def start_serving(self) -> None:
        """Warmed up: from now on the worker does its job (``serving`` set, heartbeat now)."""
        self.beat()
        self.serving.set()

    def start_thread(self, wait_ready: bool = False) -> threading.Thread:
        """Run :meth:`run` in a new daemon thread named after the worker; with
        ``wait_ready``, return once ``ready`` is set."""
        thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        thread.start()
        if wait_ready:
            self.ready.wait()
        return thread

    def raise_error(self, what: str | None = None) -> None:
        """Raise ``RuntimeError`` naming the worker (or ``what``) if its loop failed."""
        if self.error is not None:
            raise RuntimeError(f"{what or self.name} failed: {self.error!r}") from self.error
