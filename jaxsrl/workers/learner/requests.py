"""Requests that other threads make of a learner: functions run in the learner's own
thread between two updates (:meth:`TrainerWorker.run_between_updates`), so that no
thread touches the learner state while ``learn`` runs; and the layout check of a
state that replaces the learner's (population-based training's exploit).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from typing import Any, Callable

import jax
import numpy as np


class RequestQueue:
    """Functions waiting to run in a worker's thread, each with the future of its result.

    Thread-safe: any thread :meth:`submit`\\ s; the worker's thread :meth:`serve`\\ s them
    in order and, when it stops, :meth:`close`\\ s the queue (waiting and later requests
    then fail with ``RuntimeError``).

    Args:
      name: the worker's name (error messages).
    """

    def __init__(self, name: str):
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Queue ``fn(*args)``; returns the future of its result."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                future.set_exception(RuntimeError(f"{self.name} has stopped"))
            else:
                self._queue.put((fn, args, future))
        return future

    def pending(self) -> bool:
        """Whether a request waits (thread-safe; it may be served or cancelled meanwhile)."""
        return not self._queue.empty()

    def serve(self) -> None:
        """Run every queued request now (call from the worker's thread)."""
        while True:
            try:
                fn, args, future = self._queue.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue  # cancelled by its requester
            try:
                future.set_result(fn(*args))
            except Exception as exc:  # noqa: BLE001  (the requester gets it)
                future.set_exception(exc)

    def close(self) -> None:
        """Fail the waiting requests and refuse new ones (the worker stopped)."""
        with self._lock:
            self._closed = True
        while True:
            try:
                _, _, future = self._queue.get_nowait()
            except queue.Empty:
                return
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError(f"{self.name} has stopped"))


def copy_tree(tree: Any) -> Any:
    """``tree`` with every array leaf copied into a fresh buffer of the same placement
    (``jax.Array.copy`` keeps the sharding), other leaves as they are."""
    return jax.tree.map(lambda x: x.copy() if isinstance(x, (jax.Array, np.ndarray)) else x, tree)


def check_same_layout(old: Any, new: Any, what: str) -> None:
    """Check that ``new`` has ``old``'s tree structure and each leaf's shape and dtype
    (what a compiled ``learn`` needs to run on it unchanged).

    Raises:
      ValueError: a different structure, or the first leaf that differs, by path.
    """
    old_leaves, old_def = jax.tree_util.tree_flatten_with_path(old)
    new_leaves, new_def = jax.tree_util.tree_flatten_with_path(new)
    if old_def != new_def:
        raise ValueError(f"{what}: the new state's tree structure differs from the learner's "
                         f"({new_def.num_leaves} leaves vs {old_def.num_leaves})")
    for (path, a), (_, b) in zip(old_leaves, new_leaves):
        sa, sb = (np.shape(a), np.asarray(a).dtype), (np.shape(b), np.asarray(b).dtype)
        if sa != sb:
            raise ValueError(f"{what}: leaf {jax.tree_util.keystr(path)} is {sb[1]}{list(sb[0])}, "
                             f"not {sa[1]}{list(sa[0])}")


class LearnerRequests:
    """What other threads (the population manager) may ask of a learner: the public
    face of its :class:`RequestQueue` (``self._requests``), mixed into
    :class:`~jaxsrl.workers.learner.trainer.TrainerWorker`, which implements
    ``_replace_state``.
    """

    def run_between_updates(self, fn: Callable[[Any], Any]) -> concurrent.futures.Future:
        """Run ``fn(self)`` in the trainer's own thread between two updates (thread-safe).

        The trainer serves requests, in the order they came, on each turn of its loop
        (at least every 0.1 s while idle) and after each update, once it has compiled
        ``learn``. ``fn`` may read and replace ``self.state`` (never while ``learn`` runs).

        Returns:
          A future of ``fn``'s result (or of the exception it raised); if the trainer
          stops first, it fails with ``RuntimeError``.
        """
        return self._requests.submit(fn, self)

    def snapshot(self) -> concurrent.futures.Future:
        """A future of ``(state copy, version)``: every leaf of the learner state copied
        into a fresh buffer of the same placement, in the trainer's thread."""
        return self.run_between_updates(lambda t: (copy_tree(t.state), t.version))

    def request_replace(self, state: Any) -> concurrent.futures.Future:
        """Make ``state`` the learner state between two updates and publish its
        parameters as a new policy version (the population manager's exploit).

        ``state`` must have the current state's tree structure and every leaf's shape
        and dtype, placed like it (``jaxsrl.population.pbt.apply`` keeps placements), so
        the compiled ``learn`` runs on it unchanged. Pending rows are dropped
        (``replaced_rows_dropped``), and so are later segments with actions of the
        replaced parameters (``replaced_segments_dropped``).

        Returns:
          A future of the new policy version; it fails with ``ValueError`` (the state
          kept) if ``state`` does not match.
        """
        return self.run_between_updates(lambda t: t._replace_state(state))

