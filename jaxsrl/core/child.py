"""What every worker process started by the launcher does first (actors, remote
inference servers, learner processes): :func:`start_child` reads its JSON spec, sets up
logging, makes it die with its parent and turns SIGTERM/SIGINT into a clean stop; on
failure :func:`report_failure` leaves the error in the file the launcher reads.

No JAX here: actors import this.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Sequence

from jaxsrl.core.limits import raise_fd_limit

log = logging.getLogger("jaxsrl.child")


def raise_exit(signum, frame) -> None:  # noqa: ARG001
    """Signal handler: unwind with ``SystemExit(0)`` (``finally`` blocks run)."""
    raise SystemExit(0)


def install_stop_signals() -> None:
    """SIGTERM and SIGINT stop this process cleanly (see :func:`raise_exit`)."""
    signal.signal(signal.SIGTERM, raise_exit)
    signal.signal(signal.SIGINT, raise_exit)


def die_with_parent(parent_pid) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no orphans).

    Raises:
      SystemExit: the parent is not ``parent_pid`` any more (it died before ``prctl``
        took effect). ``parent_pid=None`` does nothing.
    """
    if parent_pid is None:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() != int(parent_pid):
        raise SystemExit(0)


def write_error(path: str | None, text: str) -> None:
    """Leave a failure for the launcher (it names it when it gives up on this process)."""
    if not path:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        log.exception("could not write %s", path)


def read_error(path: str | None) -> str:
    """The summary (first line, at most 500 characters) of an error file left by
    :func:`write_error` or :func:`report_failure`; ``""`` if there is none."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.readline().strip()[:500]


def read_spec(argv: Sequence[str] | None = None) -> dict:
    """The JSON spec a worker process gets as its only argument (default ``sys.argv``).

    Raises:
      ValueError: no argument, or it is not a JSON object.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        raise ValueError("a worker process takes its JSON spec as its only argument")
    spec = json.loads(argv[0])
    if not isinstance(spec, dict):
        raise ValueError(f"the spec must be a JSON object, got {argv[0][:80]!r}")
    return spec


def start_child(argv: Sequence[str] | None, label: Callable[[dict], str],
                stop: threading.Event | None = None, required: Sequence[str] = ()) -> dict:
    """The prologue of every worker process's ``main``; returns its spec.

    Reads the spec (:func:`read_spec`), checks it has the ``required`` keys, logs to
    stderr as ``[<label(spec)>] message`` (replacing handlers that imports such as
    Orbax's absl put on the root logger; absl and JAX's backend chatter quieted), dies
    with ``spec["parent_pid"]`` (:func:`die_with_parent`), raises its open-file limit
    (:func:`jaxsrl.core.limits.raise_fd_limit`), and makes SIGTERM/SIGINT
    raise ``SystemExit(0)`` (:func:`install_stop_signals`), or set ``stop`` instead
    when given (a process that may be inside a collective, which a raise cannot
    interrupt, polls it).

    Raises:
      ValueError: a bad spec, or one without a ``required`` key.
      SystemExit: the parent already died.
    """
    spec = read_spec(argv)
    missing = [key for key in required if key not in spec]
    if missing:
        raise ValueError(f"worker process spec lacks {missing}: {spec}")
    logging.basicConfig(level=logging.INFO, format=f"[{label(spec)}] %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    die_with_parent(spec.get("parent_pid"))
    raise_fd_limit()  # a server or learner holds a connection per actor
    if stop is None:
        install_stop_signals()
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    return spec


def report_failure(spec: dict, summary: str, exc: BaseException, code: int) -> int:
    """Log a fatal error with ``exc``'s traceback and leave ``summary`` (first line, which
    the launcher shows) and the traceback in ``spec["error_file"]``; returns ``code``."""
    text = "".join(traceback.format_exception(exc))
    log.error("%s; exiting (exit code %d)\n%s", summary, code, text)
    write_error(spec.get("error_file"), f"{summary}\n{text}")
    return code


def serve(spec: dict, build: Callable[[], Any], exit_codes: dict | None = None) -> int:
    """The body of a server process's ``main``: ``build()`` a server (anything with
    ``run()`` and ``close()``), run it until it stops, close it; returns the exit code.

    Args:
      spec: the process's spec (its ``error_file``).
      build: makes the server (its errors count as the server's).
      exit_codes: exception type -> exit code, for failures the launcher tells apart
        (e.g. ``NonFiniteSegment``: ``EXIT_NONFINITE``).

    Returns:
      0 when it stopped (``run`` returned, or SIGTERM/SIGINT raised ``SystemExit``); the
      mapped code, or 1, when it failed (the error reported by :func:`report_failure`).
    """
    server = None
    try:
        server = build()
        server.run()
    except SystemExit:
        return 0
    except Exception as exc:  # noqa: BLE001  (named to the launcher through the error file)
        code = next((c for t, c in (exit_codes or {}).items() if isinstance(exc, t)), None)
        return report_failure(spec, str(exc) if code is not None else repr(exc), exc, code or 1)
    finally:
        if server is not None:
            server.close()
    return 0
