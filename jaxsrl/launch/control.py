"""The launcher's control loop, and the :class:`Run` it controls.

:class:`Run` holds the frozen :class:`RunContext` of one run and what the wiring built
from it (workers, actors, ...), and what its teardown needs. :class:`ControlLoop`
watches it until the run is done: a dead worker thread stops the run naming it;
actors are watched and restarted (:class:`~jaxsrl.launch.supervision.ActorSupervisor`); metrics are logged every
``log_interval_s``, checkpoints requested every ``checkpoint_interval_s``, periodic
evaluations started and collected; the loop ends at ``total_env_steps`` or
``target_return``. SIGINT/SIGTERM (:func:`jaxsrl.core.interrupts.install_stop_handlers`) end it with
``KeyboardInterrupt``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import zmq

from jaxsrl.core import interrupts
from jaxsrl.experiment import events
from jaxsrl.experiment.metrics import Clock, MetricsAccumulator, MetricsWriter, console_line
from jaxsrl.launch.periodic_eval import PeriodicEvaluator
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.launch.serial import ThreadSpawner
from jaxsrl.launch.supervision import ActorSupervisor, ComponentDied
from jaxsrl.launch.worker_threads import Kind, WorkerThread
from jaxsrl.streams.admission import ActorTable

if TYPE_CHECKING:
    from jaxsrl.experiment.checkpoint import Checkpointer
    from jaxsrl.experiment.config import RunConfig
    from jaxsrl.experiment.dataflow import Dataflow
    from jaxsrl.launch.buffer_processes import BufferProcesses
    from jaxsrl.launch.inference_backends import InferenceBackend
    from jaxsrl.launch.placement import LearnerPlacement
    from jaxsrl.launch.population import Population
    from jaxsrl.launch.processes import Spawner
    from jaxsrl.launch.selfplay import SelfPlay
    from jaxsrl.streams.params import ParameterStore
    from jaxsrl.streams.security import CurveKeys
    from jaxsrl.workers.learner.trainer import TrainerWorker

log = logging.getLogger("jaxsrl")

#: seconds of a run with no env step counted before the control loop says so (a warning
#: and a ``no_env_steps`` event, repeated at doubling times): the first compile of a large
#: policy takes minutes, a stalled data path forever.
NO_STEPS_WARN_S = 300.0

@dataclasses.dataclass(frozen=True)
class RunContext:
    """What every builder of a run reads (``jaxsrl.launch.builders``): made once by
    :func:`jaxsrl.launch.wiring.new_run`, never reassigned.

    Attributes:
      cfg, flow: the run config and its dataflow (buffer workers completed).
      logdir: the run folder.
      clock: seconds since the run started.
      placement: where the learner runs (:class:`~jaxsrl.launch.placement.LearnerPlacement`).
      spawner: where child processes start.
      bind_host: where servers bind (``cfg.host``, or ``inproc`` in serial mode).
      context: the run's ZeroMQ context (its sockets end with it).
      inference: where inference runs (:mod:`jaxsrl.launch.inference_backends`).
      store: the learner's parameter store, shared by every worker.
      keys: the run's CURVE keys (:class:`~jaxsrl.streams.security.CurveKeys`), or ``None``.
      population: a ``--population`` run's :class:`~jaxsrl.launch.population.Population`,
        or ``None``.
      actor_threads: serial mode's spawner (its actor threads), else ``None``.
      table, metrics: the actor table and metrics shared by every worker.
    """

    cfg: RunConfig
    flow: Dataflow
    logdir: str
    clock: Clock
    placement: LearnerPlacement
    spawner: Spawner
    bind_host: str
    context: zmq.Context
    inference: InferenceBackend
    store: ParameterStore
    keys: CurveKeys | None = None
    population: Population | None = None
    actor_threads: ThreadSpawner | None = None
    table: ActorTable = dataclasses.field(default_factory=ActorTable)
    metrics: MetricsAccumulator = dataclasses.field(default_factory=MetricsAccumulator)

    @property
    def server_keys(self) -> tuple | None:
        """``(public, secret)`` CURVE server keys of the run's sockets, or ``None``."""
        return (self.keys.server_public, self.keys.server_secret) if self.keys else None


@dataclasses.dataclass
class Run:
    """One run as the launcher built it: its frozen :class:`RunContext` (``ctx``; its
    fields read as attributes of the run too, ``run.cfg``) and what the builders made
    (``jaxsrl.launch.wiring.start``).

    Attributes:
      ctx: the run's context.
      buffers: the supervisor of the run's buffer processes
        (:class:`~jaxsrl.launch.buffer_processes.BufferProcesses`), or ``None``.
      trainers: sample stream -> its trainer.
      checkpointers: one per trainer.
      selfplay: a run's opponent pools (:class:`~jaxsrl.launch.selfplay.SelfPlay`), or ``None``.
      auth: the CURVE authenticator, or ``None``.
      workers: every worker thread of this process (trainers first).
      actors: the actor processes (or threads).
      writer, evaluator: metrics sink and periodic evaluation (``None`` until made).
      seed_base: environment seed of the first actor runs.
    """

    ctx: RunContext
    buffers: BufferProcesses | None = None
    trainers: dict[str, TrainerWorker] = dataclasses.field(default_factory=dict)
    checkpointers: list[Checkpointer] = dataclasses.field(default_factory=list)
    selfplay: SelfPlay | None = None
    auth: Any = None
    workers: list[WorkerThread] = dataclasses.field(default_factory=list)
    actors: list[ChildProcess] = dataclasses.field(default_factory=list)
    writer: MetricsWriter | None = None
    evaluator: PeriodicEvaluator | None = None
    seed_base: int = 0

    def __getattr__(self, name: str) -> Any:
        """A field of the run's context (``run.cfg`` is ``run.ctx.cfg``)."""
        if name == "ctx":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.ctx, name)

    def actor_runs(self) -> dict:
        """``{actor_id: run_id}`` of the actor processes started so far."""
        return {a.spec["actor_id"]: a.spec["run_id"] for a in self.actors if "run_id" in a.spec}

    def trainer_threads(self) -> list[WorkerThread]:
        return [w for w in self.workers if w.kind is Kind.TRAINER]

    def end_context(self) -> None:
        """Destroy the run's ZeroMQ context, unless a worker thread still runs (a
        stuck one keeps its sockets); serial mode's actor threads: see
        :meth:`~jaxsrl.launch.serial.ThreadSpawner.end_context`."""
        if any(w.thread.is_alive() for w in self.workers):
            return
        if self.actor_threads is not None:
            self.actor_threads.end_context()
        else:
            self.context.destroy(linger=0)


class ControlLoop:
    """Watches a started :class:`Run` until it is done (see module docstring)."""

    def __init__(self, run: Run):
        self.run = run
        self.last_log = self.last_ckpt = run.clock()
        self.record: dict = {}
        self.responsive_since: float | None = None  # since when every worker kept turning its loop
        self.no_steps_warn_at = NO_STEPS_WARN_S  # run time of the next "no env step yet" warning
        self.supervisor = ActorSupervisor(run.cfg, run.actors, run.table, run.metrics,
                                          run.inference.liveness, run.seed_base)

    def __call__(self) -> dict:
        """Loop until done; returns the last metrics record.

        Raises:
          ComponentDied: a worker thread died, or an actor could not be kept running.
          KeyboardInterrupt: SIGINT or SIGTERM.
        """
        while True:
            time.sleep(0.02)
            interrupts.check()  # the signal's own KeyboardInterrupt may have been dropped
            self._check_workers()
            mono = time.monotonic()
            self._update_responsive(mono)
            self.supervisor.check(mono, self.responsive_since)
            if self._log_metrics():
                return self.record
            self._warn_no_steps()
            self._request_checkpoints()
            self._evaluate()

    def _check_workers(self) -> None:
        for w in self.run.workers:
            if w.worker.error is not None:
                raise ComponentDied(f"{w.name} died: {w.worker.error!r}") from w.worker.error
            if not w.thread.is_alive():
                raise ComponentDied(f"{w.name} stopped unexpectedly")

    def _update_responsive(self, mono: float) -> None:
        """An actor is hung only if silent while every worker kept turning its loop
        (warmed up, not stuck in a long update or checkpoint) all that time."""
        hang_s = self.run.cfg.actor_heartbeat_timeout_s
        if all(w.worker.serving.is_set() and mono - w.worker.heartbeat < max(hang_s / 2, 1.0)
               for w in self.run.workers):
            self.responsive_since = self.responsive_since or mono
        else:
            self.responsive_since = None

    def _log_metrics(self) -> bool:
        """Write a metrics record when due, and at once when the run is done (its
        ``total_env_steps``, or ``target_return`` reached by the episode window's mean
        return, checked on every turn of the loop, not only at records); True when done."""
        cfg, now = self.run.cfg, self.run.clock()
        done = self.run.metrics.env_steps >= cfg.total_env_steps
        if cfg.target_return is not None and not done:
            ret = self.run.metrics.window_mean("episode_return_mean")
            done = ret is not None and ret >= cfg.target_return
        if done or now - self.last_log >= cfg.log_interval_s:
            self.record = self.run.metrics.snapshot(now - self.last_log) | {"wall_time_s": now}
            self.last_log = now
            self.run.writer.write(self.record)
            if self.run.writer.progress is None:  # the progress bar shows the same figures
                log.info(console_line(self.record))
            ret = self.record.get("episode_return_mean")
            if cfg.target_return is not None and ret is not None and ret >= cfg.target_return:
                log.info("target return %.1f reached", cfg.target_return)
                return True
        return done

    def _warn_no_steps(self) -> None:
        """Say so when no env step has been counted :data:`NO_STEPS_WARN_S` into the run,
        and again at doubling times: a run that trains nothing must not look busy."""
        now = self.run.clock()
        if now < self.no_steps_warn_at or self.run.metrics.env_steps:
            return
        self.no_steps_warn_at = 2 * now
        events.emit(log, logging.WARNING, "no_env_steps", {"seconds": round(now, 1)},
                    "no env step has reached the learner in %.0f s of the run: the actors' "
                    "segments are not arriving (actor errors, if any, are in %s)", now,
                    os.path.join(self.run.logdir, "errors"))

    def _request_checkpoints(self) -> None:
        now = self.run.clock()
        if now - self.last_ckpt >= self.run.cfg.checkpoint_interval_s:
            self.last_ckpt = now
            for t in self.run.trainers.values():
                t.checkpoint_requested.set()

    def _evaluate(self) -> None:
        evaluator, trainers = self.run.evaluator, self.run.trainers.values()
        if not evaluator.every:
            return
        version = min(t.version for t in trainers)
        if evaluator.due(version):
            for t in trainers:
                t.checkpoint_requested.set()
            evaluator.requested(version)
        saved = None
        if evaluator.pending_version is not None:
            saved = min(t.checkpointer.latest_step() or -1 for t in trainers)
        result = evaluator.poll(saved)
        if result:
            self.run.metrics.add_means(result)
