"""Stop signals (SIGINT, SIGTERM) for code that runs compiled calls in a loop.

Python raises a signal handler's exception in whatever Python code the main thread runs
next. Between two compiled calls that is often code called back from C++ (JAX's dispatch,
compilation and garbage-collection hooks), where the exception is dropped ("Exception
ignored in ...") and the loop goes on as if no signal came. So a signal always also sets a process-wide flag, and loops check it between calls (:func:`check`):

- :func:`install_stop_handlers` (a run, ``jaxsrl-evaluate``): SIGINT and SIGTERM set the
  flag and raise ``KeyboardInterrupt`` where they land;
- :func:`interrupt_flag` (around a loop of compiled calls): while it runs, the signals
  only set the flag; the loop raises ``KeyboardInterrupt`` itself between two calls, so
  no exception unwinds through JAX's C++ frames.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

_requested = threading.Event()
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum, frame):
    _requested.set()
    raise KeyboardInterrupt(f"signal {signum}")


def _set_flag(signum, frame):
    _requested.set()


def requested() -> bool:
    """Whether a stop signal arrived since :func:`install_stop_handlers`."""
    return _requested.is_set()


def check() -> None:
    """Raises:
      KeyboardInterrupt: a stop signal arrived (its own exception may have been dropped)."""
    if _requested.is_set():
        raise KeyboardInterrupt("stop signal")


def install_stop_handlers() -> dict:
    """SIGINT and SIGTERM -> the flag and ``KeyboardInterrupt``; clears the flag and
    returns the previous handlers (``{signum: handler}``, for ``signal.signal``).

    Only the main thread may set handlers; elsewhere (e.g. ``train()`` in a worker
    thread) nothing changes, ``{}`` is returned and the caller's handling stays in charge.
    """
    _requested.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupt) for sig in SIGNALS}


def restore(previous: dict) -> None:
    """Put back the handlers :func:`install_stop_handlers` returned."""
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def interrupt_flag() -> Iterator[None]:
    """While the block runs, SIGINT (and SIGTERM where a Python handler is installed for
    it) only set the flag; the block calls :func:`check` between compiled calls. The
    previous handlers come back after it; a signal that came during it stays requested.
    Outside the main thread nothing is installed.

    Raises:
      KeyboardInterrupt: on entry, when a stop signal came before it (:func:`check`).
    """
    check()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in SIGNALS:
        old = signal.getsignal(sig)
        if sig == signal.SIGINT or callable(old):
            previous[sig] = old
            signal.signal(sig, _set_flag)
    try:
        yield
    finally:
        restore(previous)
