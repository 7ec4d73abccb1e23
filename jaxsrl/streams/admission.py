"""Guards shared by the servers of a run: who may talk to them, and how drops are logged.

* :class:`ActorTable` — the run id each actor id currently has (set by the launcher
  when it starts or restarts an actor) and when each actor was last heard from. The
  policy workers and trainers check every message's ``actor``/``run`` meta against it
  (a message of an unknown actor, or of a previous run of a restarted actor, is
  dropped, so a restarted actor's half-finished state is never mixed with its new
  one) and record the time of each valid one (the launcher's hang detection).
* :class:`DropLog` — rate-limited "dropped a malformed message" warnings, so a flood of
  hostile messages cannot flood the log (every drop is still counted in metrics, and the
  latest ones are kept as :class:`Drop` records); the expected drops of a restarted
  actor's previous run are logged as such, not as malformed.
* :func:`nonfinite_arrays` — names of float arrays holding NaN or Inf.

This module imports no JAX.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Mapping, NamedTuple

import numpy as np

from jaxsrl.streams.wire import WireError

_MAX_ID = 2**63


class StaleRunError(WireError):
    """A message from an actor id whose run id is not the current one (a restarted actor)."""


def message_ids(meta: Mapping) -> tuple[int, int]:
    """``(actor, run)`` of a message's meta.

    Raises:
      WireError: a missing or non-integer id.
    """
    ids = []
    for key in ("actor", "run"):
        value = meta.get(key)
        if type(value) is not int or not 0 <= value < _MAX_ID:  # noqa: E721 (bool is not an id)
            raise WireError(f"meta {key!r} must be a non-negative integer, got {value!r}")
        ids.append(value)
    return ids[0], ids[1]


class ActorTable:
    """Current run id and last-seen time of every actor of a run. Thread-safe.

    Attributes:
      generation: an int that changes (grows) whenever the accepted ``(actor, run)`` pairs
        may have changed (every :meth:`register`): a verdict of :meth:`check` that a
        server remembers holds only while ``generation`` is the one it was given under.
    """

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[int, int] = {}
        self._seen: dict[int, float] = {}
        self.generation = 0

    def register(self, actor_id: int, run_id: int) -> None:
        """Make ``run_id`` the only accepted run of ``actor_id`` (start or restart)."""
        with self._lock:
            self.generation += 1  # before the change: a check racing it is not remembered
            self._runs[int(actor_id)] = int(run_id)
            self._seen[int(actor_id)] = self._clock()

    def check(self, meta: Mapping) -> int:
        """Validate a message's ids; returns the actor id.

        Raises:
          WireError: missing or malformed ids, or an actor id this run never started.
          StaleRunError: the run id is not the actor's current one.
        """
        actor, run = message_ids(meta)
        with self._lock:
            current = self._runs.get(actor)
        if current is None:
            raise WireError(f"unknown actor id {actor}")
        if run != current:
            raise StaleRunError(f"run id {run} of actor {actor} is not its current run {current} "
                                f"(a message from before a restart)")
        return actor

    def seen(self, actor_id: int) -> None:
        """Record that a valid message of ``actor_id`` arrived now."""
        now = self._clock()
        with self._lock:
            if actor_id in self._seen:
                self._seen[actor_id] = now

    def seen_all(self, actor_ids) -> None:
        """:meth:`seen` for each of ``actor_ids`` (an iterable of ids :meth:`check`
        returned), at one time: a server recording a batch of requests at once. A
        subclass that overrides :meth:`seen` gets its :meth:`seen` per id."""
        if type(self).seen is not ActorTable.seen:  # (it records more than the time)
            for actor_id in actor_ids:
                self.seen(actor_id)
            return
        now = self._clock()
        with self._lock:
            seen = self._seen
            for actor_id in actor_ids:
                if actor_id in seen:
                    seen[actor_id] = now

    def last_seen(self, actor_id: int) -> float | None:
        with self._lock:
            return self._seen.get(actor_id)


class Drop(NamedTuple):
    """One dropped input, as :class:`DropLog` keeps it.

    Attributes:
      worker: the server's name.
      what: the kind of input (``"request"``, ``"segment"``, ...).
      reason: why it was dropped (the checker's one-line message).
      stale: it came from an actor's previous run (expected after a restart).
    """

    worker: str
    what: str
    reason: str
    stale: bool


class DropLog:
    """Warn about dropped messages, at most ``per_second`` lines a second per worker.

    Suppressed drops are summarised in the next line that gets through. Every drop,
    logged or not, is also kept as a :class:`Drop` record: the latest ``keep`` of them
    are returned by :meth:`recent` (for tests and debugging; counts live in metrics).
    """

    def __init__(self, logger: logging.Logger, what: str, per_second: float = 5.0,
                 keep: int = 64):
        self._log, self._what = logger, what
        #: the address the messages came in on (its owner sets it once bound), named in
        #: every line: ``dropped a malformed status at tcp://127.0.0.1:40123: ...``.
        self.where = ""
        self._interval = 1.0 / per_second
        self._next = 0.0
        self._suppressed = 0
        self._lock = threading.Lock()
        self._recent: collections.deque = collections.deque(maxlen=keep)

    def recent(self) -> list[Drop]:
        """The latest drops (at most ``keep``), oldest first."""
        with self._lock:
            return list(self._recent)

    def __call__(self, worker: str, reason: object) -> None:
        now = time.monotonic()
        stale = isinstance(reason, StaleRunError)
        reason = _one_line(reason)  # a peer's 64 KiB value never becomes a 64 KiB log line
        with self._lock:
            self._recent.append(Drop(worker, self._what, reason, stale))
            if now < self._next:
                self._suppressed += 1
                return
            self._next = now + self._interval
            suppressed, self._suppressed = self._suppressed, 0
        more = f" ({suppressed} more dropped since the last such line)" if suppressed else ""
        where = f" at {self.where}" if self.where else ""
        if stale:  # expected for a moment after an actor restart
            self._log.info("%s: dropped a %s of an actor's previous run (expected after a "
                           "restart)%s: %s%s", worker, self._what, where, reason, more)
            return
        self._log.warning("%s: dropped a malformed %s%s: %s%s", worker, self._what, where,
                          reason, more)


def _one_line(reason: object, limit: int = 300) -> str:
    text = " ".join(str(reason).split())
    return text if len(text) <= limit else text[:limit] + "..."


def drop_input(drop_log: DropLog, worker: str, exc: BaseException, metrics, counter: str,
               stale_counter: str) -> None:
    """Log (rate-limited, through ``drop_log``) and count one input a server dropped:
    under ``stale_counter`` if it came from an actor's previous run
    (:class:`StaleRunError`), else under ``counter``.

    Args:
      drop_log: the server's :class:`DropLog`.
      worker: the server's name.
      exc: why the input was refused (a ``WireError``, or whatever checking it raised).
      metrics: the run's accumulator (its ``count``).
      counter, stale_counter: counter names, e.g. ``dropped_segments`` and
        ``stale_run_segments_dropped``.
    """
    # a checker's bug met by odd input (not a WireError): the exception's type named too
    drop_log(worker, exc if isinstance(exc, WireError) else f"{type(exc).__name__}: {exc}")
    metrics.count(stale_counter if isinstance(exc, StaleRunError) else counter)


def nonfinite_arrays(arrays: Mapping[str, np.ndarray], names=None) -> list[str]:
    """Names (among ``names``, default all) of floating-point arrays holding NaN or Inf."""
    bad = []
    for name in (arrays if names is None else names):
        arr = arrays[name]
        if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
            bad.append(name)
    return bad
