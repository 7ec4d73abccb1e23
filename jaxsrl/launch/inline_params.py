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
  messages as ``param_dropped/<reason>``. Anything else on the socket is ignored.

It is ``ready`` (``param_address`` and ``status_address`` known) once both are bound.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import zmq

from jaxsrl.core.worker import Worker
from jaxsrl.streams import wire
from jaxsrl.streams.param_stream import ParamPublisher
from jaxsrl.streams.sockets import bind, drain, open_socket

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

    def _run(self) -> None:
        """Publish and collect statuses until ``stop`` is set."""
        status = None
        try:
            status = open_socket(self.context, zmq.PULL, max_frame_bytes=wire.MAX_HEADER_BYTES,
                                 curve_server=self.curve)
            self.status_address = bind(status, self.host, name="inline-status")
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
        """Take one ``inline_status`` (see module docstring); anything else is ignored."""
        try:
            msg = wire.decode(frames, max_bytes=0)
            if msg.kind != "inline_status":
                return
            actor = self.table.check(msg.meta)
        except wire.WireError:  # not from a live actor run of this run
            return
        self.table.seen(actor)
        meta = msg.meta
        versions = meta.get("versions")
        if isinstance(versions, dict):
            for policy, version in versions.items():
                learner = self.metrics.policy_version.get(policy)
                if type(version) is int and version >= 0 and learner is not None:  # noqa: E721
                    self.metrics.add_means({"param_lag/inline": learner - version})
        dropped = meta.get("dropped")
        if isinstance(dropped, dict):
            for policy, reasons in list(dropped.items())[:16]:
                if not isinstance(reasons, dict):
                    continue
                for reason, n in list(reasons.items())[:16]:
                    key = (actor, meta.get("run"), policy, reason)
                    if isinstance(reason, str) and len(reason) < 32 and type(n) is int \
                            and n > self._dropped.get(key, 0):  # noqa: E721
                        self.metrics.count(f"param_dropped/{reason}", n - self._dropped.get(key, 0))
                        self._dropped[key] = n
