"""Launcher side of inline inference (``--inference=inline``): the parameter stream to
the actors and their status reports.

:class:`InlineParameters` runs as a worker thread of the learner process (a
``Kind.WATCH`` worker). It binds

* the parameter stream (:class:`~jaxsrl.streams.param_stream.ParamPublisher`, the PUB
  socket remote inference servers subscribe to, fed from the learner's
  :class:`~jaxsrl.streams.params.ParameterStore`): every policy of the run's trainers,
  each new version at most every ``--param_publish_interval_s``, the newest re-sent every
  second for actors that start (or restart) later;
* a status socket (PULL) the inline actors (:mod:`jaxsrl.workers.inline`) PUSH an
  ``inline_status`` to every second, also while they wait on their learner. A status
  of a live actor run (the run's :class:`~jaxsrl.streams.admission.ActorTable`) marks the
  actor seen, the launcher's hang detection, as an inference server does for plain
  actors; it logs ``param_lag/inline`` (the learner's version minus the one the actor acts
  with, in versions, averaged over statuses) and counts the actors' dropped parameter
  messages as ``param_dropped/<reason>``. A status is checked once
  (:data:`~jaxsrl.streams.status.INLINE_STATUS`); a malformed one is dropped with a
  warning and counted (``dropped_status``).

It is ``ready`` (``param_address`` and ``status_address`` known) once both are bound.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.streams import wire
from jaxsrl.streams.admission import DropLog, drop_input
from jaxsrl.streams.param_stream import ParamPublisher
from jaxsrl.streams.sockets import drain
from jaxsrl.streams.status import DROPPED_STATUS, INLINE_STATUS, bind_status

log = logging.getLogger("jaxsrl.launch.inline_params")


class InlineParameters(Worker):
    """Parameter publisher and status sink of a run's inline actors (module docstring).

    Args:
      cfg: the run config (``param_publish_interval_s``).
      policies: the policies to publish.
      store: the learner's parameter store.
      metrics: the run's metrics.
      table: the run's actor table.
      context: the run's ZeroMQ context.
      host: interface to bind (``jaxsrl.streams.sockets.INPROC`` in serial mode).
      curve: ``(public, secret)`` server keys to require CURVE, or ``None``.

    Attributes:
      param_address, status_address: where the actors connect (after ``ready``).
      publisher: the :class:`ParamPublisher` (after ``ready``).
    """

    def __init__(self, cfg: Any, policies: Sequence[str], store: Any, metrics: Any, table: Any,
                 context: zmq.Context, host: str, curve: tuple | None = None):
        super().__init__("inline parameters")
        self.cfg, self.policies, self.store = cfg, sorted(set(policies)), store
        self.metrics, self.table, self.context = metrics, table, context
        self.host, self.curve = host, curve
        self.param_address: str | None = None
        self.status_address: str | None = None
        self.publisher: ParamPublisher | None = None
        self._dropped: dict[tuple, int] = {}  # (actor, run, policy, reason) -> count reported
        self._drop_log = DropLog(log, "status")

    def _run(self) -> None:
        """Publish and collect statuses until ``stop`` is set."""
        status = None
        try:
            status, self.status_address = bind_status(self.context, self.host, "inline-status",
                                                      self.curve)
            self._drop_log.where = self.status_address
            self.publisher = ParamPublisher(self.store, self.policies, self.context, self.host,
                                            interval_s=self.cfg.param_publish_interval_s,
                                            curve=self.curve, metrics=self.metrics)
            self.param_address = self.publisher.start()
            self.ready.set()
            self.start_serving()
            while not self.stop.is_set():
                self.beat()
                if self.publisher.error is not None:
                    raise RuntimeError(f"parameter publisher failed: {self.publisher.error!r}")
                drain(status, self.on_status)
        finally:
            if self.publisher is not None:
                self.publisher.close()
            if status is not None:
                status.close()

    def on_status(self, frames: list) -> None:
        """Take one ``inline_status`` (see module docstring): a malformed message is dropped
        with a rate-limited warning and counted (``dropped_status``); one of an unknown
        actor or an actor's previous run is ignored."""
        try:
            meta = INLINE_STATUS.decode(frames)
        except Exception as exc:  # noqa: BLE001  (WireError; anything else is a decoder bug: drop too)
            drop_input(self._drop_log, self.name, exc, self.metrics, DROPPED_STATUS, DROPPED_STATUS)
            return
        try:
            actor = self.table.check(meta)
        except wire.WireError:  # not from a live actor run of this run
            return
        self.table.seen(actor)
        for policy, version in meta["versions"].items():
            learner = self.metrics.policy_version.get(policy)
            if version >= 0 and learner is not None:
                self.metrics.add_means({"param_lag/inline": learner - version})
        for policy, reasons in list(meta["dropped"].items())[:16]:
            for reason, n in list(reasons.items())[:16]:
                key = (actor, meta["run"], policy, reason)
                if len(reason) < 32 and n > self._dropped.get(key, 0):
                    self.metrics.count(f"param_dropped/{reason}", n - self._dropped.get(key, 0))
                    self._dropped[key] = n
