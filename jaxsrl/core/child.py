"""What every worker process started by the launcher does first (actors, remote
inference servers, learner processes): die with its parent, turn SIGTERM/SIGINT into a
clean ``SystemExit(0)``, and leave its failure in an error file the launcher reads.

No JAX here: actors import this.
"""

from __future__ import annotations

import logging
import os
import signal

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
        import ctypes  # noqa: PLC0415
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
