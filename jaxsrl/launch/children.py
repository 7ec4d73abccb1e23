"""One supervisor of the child processes that report to the launcher over a status socket.

:class:`ChildSupervisor` is a :class:`~jaxsrl.core.worker.Worker` thread of the learner
process. It binds a status socket (PULL), starts its children
(:class:`~jaxsrl.launch.processes.ChildProcess`), and on every turn takes their statuses
and applies its rules:

* **status**: each message is checked once against the subclass's
  :class:`~jaxsrl.streams.status.StatusSchema`; a malformed one is dropped with a
  rate-limited warning and counted (``dropped_status``); one naming no child of this
  supervisor, or a previous process of the child (another run id), is ignored. A good one
  sets the child's ``serving``, ``last_status`` and ``heartbeat`` (now minus its
  ``heartbeat_age_s``), adds the increase of its run-long ``counters`` to the metrics and
  marks the actors in ``seen`` as seen (the launcher's hang detection);
* **startup limit**: a child that does not serve :attr:`ChildSupervisor.startup_limit_s`
  after its start (it compiles meanwhile) is restarted;
* **silence**: a serving child that sends no status, or whose loop does not turn, for
  ``cfg.actor_timeout_s`` is restarted; so is one that exits;
* **restart budget**: at most ``cfg.max_server_restarts`` restarts per run, all its
  children together; the next failure raises ``RuntimeError`` naming the child, its reason
  and the first line of its error file (the launcher then stops the run);
* **restart events**: each restart is counted (``<sender>_restarts``) and recorded as the
  run event ``<sender>_restart`` with ``{<sender>: name, reason, error, restart}``, where
  ``<sender>`` is the schema's sender key (``server``, ``buffer``).

It is ``ready`` once every child served, ``serving`` while every child serves, and its
``heartbeat`` is then the oldest of its children's. A subclass supplies only what is its
own: the children (:class:`Child` records), the schema, and the hooks below.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable, Sequence

import zmq

from jaxsrl.core.child import read_error
from jaxsrl.core.worker import Worker
from jaxsrl.experiment import events
from jaxsrl.launch.processes import exit_reason, stop_all
from jaxsrl.streams.admission import DropLog, drop_input
from jaxsrl.streams.sockets import drain
from jaxsrl.streams.status import DROPPED_STATUS, StatusSchema, bind_status

#: seconds a child may take from its start to serving (it compiles meanwhile).
STARTUP_LIMIT_S = 300.0


@dataclasses.dataclass(kw_only=True)
class Child:
    """The supervisor's state of one child process. A subclass declares ``name`` (str)
    and ``child`` (its :class:`~jaxsrl.launch.processes.ChildProcess`) and its own fields.

    Attributes:
      serving: its newest status said it serves.
      last_status: ``time.monotonic()`` of its newest status of the current process run
        (0: none yet).
      heartbeat: when its loop last turned (the supervisor's clock).
      counters: run-long counters of its current process run, as last reported.
    """

    serving: bool = False
    last_status: float = 0.0
    heartbeat: float = 0.0
    counters: dict = dataclasses.field(default_factory=dict)

    def reset(self) -> None:
        """Forget the previous process run (called before each start)."""
        self.serving, self.last_status, self.counters = False, 0.0, {}


class ChildSupervisor(Worker):
    """Supervisor thread of some child processes (see the module docstring).

    Args:
      name: the worker's name, the children's kind in the plural (``buffer processes``).
      what: one child's kind, for messages (``buffer process``).
      schema: the children's status schema; its fields include the sender key,
        ``run``, ``serving``, ``heartbeat_age_s``, ``counters`` and ``seen``.
      children: the :class:`Child` records (started by :meth:`run`).
      cfg: the run config (``host``, ``actor_timeout_s``, ``max_server_restarts``).
      table: the run's actor table (``seen_all``).
      context: the run's ZeroMQ context.
      logger: where restarts and drops are logged.
      curve: ``(public, secret)`` server keys the status socket requires, or ``None``.

    Attributes:
      restarts: restarts so far in this run, all children together.
      startup_limit_s: see the module docstring (default :data:`STARTUP_LIMIT_S`).
      clock: the clock of ``last_status`` and ``heartbeat`` (``time.monotonic``).
    """

    startup_limit_s = STARTUP_LIMIT_S
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, name: str, what: str, schema: StatusSchema, children: Sequence[Child],
                 cfg: Any, table: Any, context: zmq.Context, logger: logging.Logger,
                 curve: tuple | None = None):
        super().__init__(name)
        self.what, self.schema, self.children = what, schema, list(children)
        self.cfg, self.table, self.context, self.logger = cfg, table, context, logger
        self.curve = curve
        self.restarts = 0
        self.drop_log = DropLog(logger, "status")

    # -- what a subclass supplies -------------------------------------------------------
    def _metrics(self, child: Child) -> Any:
        """The metrics that ``child``'s counters, restarts and malformed statuses go to."""
        raise NotImplementedError

    def _apply(self, child: Child, meta: dict) -> None:
        """The subclass's part of a checked status of ``child``'s current run."""

    def _prepare(self, status_address: str) -> dict:
        """Before the first start: spec keys every child gets besides ``status_address``."""
        return {}

    def _turn(self) -> None:
        """Once per turn of the loop, before the statuses (raise to stop the run)."""

    def _exited(self, child: Child, code: int) -> None:
        """``child`` exited with ``code``; raise to stop the run instead of restarting it."""

    def _close(self) -> None:
        """After the children stopped: release what :meth:`_prepare` and the hooks opened."""

    def _describe(self, child: Child) -> str:
        """``child`` in the line that says every child serves."""
        return child.name

    def _where(self, child: Child) -> str:
        """Where a restarted ``child`` starts again and what happens meanwhile, for the
        restart line (`` on the same ports (its replay refills)``)."""
        return ""

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        """Supervise until ``stop`` is set (``run()`` calls this; exceptions end in ``error``)."""
        status = None
        try:
            status, address = bind_status(self.context, self.cfg.host, self.schema.kind, self.curve)
            self.drop_log.where = address
            self.start_children(address)
            while not self.stop.is_set():
                self._turn()
                drain(status, self.on_status)
                self.watch(self.clock())
        finally:
            stop_all([c.child for c in self.children])
            self._close()
            if status is not None:
                status.close()

    def start_children(self, status_address: str) -> None:
        """Start every child, its spec given ``status_address`` and :meth:`_prepare`'s keys."""
        extra = {"status_address": status_address, **self._prepare(status_address)}
        for c in self.children:
            c.child.spec = c.child.spec | extra
            self._start(c)

    def _start(self, c: Child) -> None:
        path = c.child.spec.get("error_file")
        if path and os.path.exists(path):
            os.remove(path)
        c.reset()
        c.child.start()

    def on_status(self, frames: list) -> None:
        """Take one status message (see the module docstring); never raises on its content."""
        try:
            meta = self.schema.decode(frames)
        except Exception as exc:  # noqa: BLE001  (WireError; anything else is a decoder bug: drop too)
            drop_input(self.drop_log, self.name, exc, self._metrics(self.children[0]),
                       DROPPED_STATUS, DROPPED_STATUS)
            return
        c = next((x for x in self.children if x.name == meta[self.schema.sender]), None)
        if c is None or meta["run"] != c.child.spec.get("run_id"):
            return  # not of this supervisor, or from a previous (killed) process of the child
        now = self.clock()
        c.last_status, c.heartbeat = now, now - meta["heartbeat_age_s"]
        c.serving = meta["serving"]
        self._apply(c, meta)
        metrics = self._metrics(c)
        for k, v in meta["counters"].items():
            if len(k) < 64 and v > c.counters.get(k, 0):
                metrics.count(k, v - c.counters.get(k, 0))
                c.counters[k] = v
        self.table.seen_all(meta["seen"])

    def watch(self, now: float) -> None:
        """Restart every child that failed a rule at ``now`` (the supervisor's clock);
        update ``ready``, ``serving`` and ``heartbeat``.

        Raises:
          RuntimeError: a child failed once the restart budget is spent (or a hook raised).
        """
        for c in self.children:
            reason = self._failure(c, now)
            if reason is not None:
                self._restart(c, reason)
        if all(c.serving for c in self.children):
            self.serving.set()
            self.heartbeat = min(c.heartbeat for c in self.children)
            if not self.ready.is_set():
                self.logger.info("%s serving: %s", self.name,
                                 ", ".join(self._describe(c) for c in self.children))
                self.ready.set()
        else:
            self.serving.clear()

    def _failure(self, c: Child, now: float) -> str | None:
        """Why ``c`` must be restarted at ``now`` (``None``: it need not)."""
        code = c.child.proc.poll()
        if code is not None:
            self._exited(c, code)
            return exit_reason(code)
        if not c.serving:
            if now - c.child.started_at > self.startup_limit_s:
                return f"was not serving {self.startup_limit_s:g} s after its start"
            return None
        silent_s = self.cfg.actor_timeout_s
        if now - c.last_status > silent_s:
            return f"sent no status for {now - c.last_status:.1f} s"
        if now - c.heartbeat > silent_s:
            return f"its loop stalled for {now - c.heartbeat:.1f} s"
        return None

    def _restart(self, c: Child, reason: str) -> None:
        """Kill ``c`` and start it again, within the budget (see the module docstring)."""
        what, limit = f"{self.what} {c.name}", self.cfg.max_server_restarts
        c.child.kill()
        error = read_error(c.child.spec.get("error_file"))
        said = f"{what} (pid {c.child.proc.pid}) {reason}" + (f": {error}" if error else "")
        if self.restarts >= limit:
            raise RuntimeError(f"{said}; {self.name} were restarted {self.restarts} times in "
                               f"this run (max_server_restarts={limit}), giving up")
        self.restarts += 1
        sender = self.schema.sender
        self._metrics(c).count(f"{sender}_restarts")
        events.emit(self.logger, logging.WARNING, f"{sender}_restart",
                    {sender: c.name, "reason": reason, "error": error, "restart": self.restarts},
                    "%s; restarting it%s; restart %d of at most %d", said, self._where(c),
                    self.restarts, limit)
        self._start(c)
