"""Process limits a process with many peers needs: open files.

Every actor holds one TCP connection to its inference server and one to its learner's
sample socket, and each connection is one file descriptor in the receiving process
(``docs/benchmarks.md``, *Fan in*: 2.0 per actor in a process hosting both). A soft
``RLIMIT_NOFILE`` of 1024 (a common default) stops such a process near 500 actors, so
the launcher and every worker process raise it to the hard limit. No JAX here.
"""

from __future__ import annotations

import resource


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; returns ``(soft,
    hard)`` after (unchanged where the hard limit is unlimited, or where the system
    refuses: then the soft limit stays)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard
