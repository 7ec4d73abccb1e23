"""Trainer worker (learner): turns trajectory segments into new parameters.

Runs as a thread of the accelerator process. It binds a ZeroMQ PULL socket for the
sample stream, validates each ``segment`` message, assembles ``batch_segments`` rows into a
:class:`~jaxsrl.core.agent.Trajectory`, runs the jitted ``learn`` over the local devices,
bumps the policy version and publishes the new parameters on device. Between
updates it saves checkpoints when asked.

Staleness: with ``max_staleness`` = k > 0, no update learns from an action more than k
versions older than the parameters it updates. The rule is applied when a batch is
assembled (rows left over from one batch wait while later updates bump the version):
each pending row whose oldest action is more than k versions behind is dropped
(``stale_rows_dropped``); a segment already that stale on arrival is dropped whole
(``stale_segments_dropped``).

Faults it guards against (each counted in the run metrics):

* a malformed segment (not a ``segment`` of this schema, too many rows, ids of no
  live actor, action versions from the future) is dropped with a (rate-limited)
  logged reason: ``dropped_segments``; one from an earlier run of a restarted actor:
  ``stale_run_segments_dropped``;
* NaN or Inf in observations, rewards or log-probabilities: with
  ``on_nonfinite="drop"`` the segment is dropped (``nonfinite_segments_dropped``),
  with ``"raise"`` the trainer stops with :class:`NonFiniteError` (the run stops
  naming it);
* an update whose new learner state holds NaN or Inf is discarded: the previous
  state is kept, nothing is published (``nonfinite_updates_skipped``).

Other threads (the population manager) act on the learner state only through
:meth:`TrainerWorker.run_between_updates` (and :meth:`~TrainerWorker.snapshot`,
:meth:`~TrainerWorker.request_replace` built on it): the trainer's own thread runs
the request between two updates, so nothing touches the state while ``learn`` runs.
A replaced state is published as a new policy version; samples with actions of the
parameters it replaced are dropped (``replaced_rows_dropped``,
``replaced_segments_dropped``): they were chosen by another policy.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import zmq

from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.core.worker import Worker
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams.admission import ActorTable
from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.segment import segment_schema, to_trajectory
from jaxsrl.streams.segment_gate import NonFiniteSegment, SegmentGate
from jaxsrl.streams.sockets import bind, open_socket
from jaxsrl.workers.learner.requests import LearnerRequests, RequestQueue, check_same_layout

log = logging.getLogger("jaxsrl.trainer")


class NonFiniteError(NonFiniteSegment):
    """A segment held NaN or Inf and the run is configured with ``on_nonfinite="raise"``."""


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


@dataclasses.dataclass(frozen=True)
class TrainerSettings:
    """A trainer's batch shape, sample-stream admission rules and socket.

    Attributes:
      segment_length: ``T`` steps per segment.
      batch_segments: rows (segments) per ``learn`` call.
      max_staleness: no update uses a row whose oldest action is more than this many
        versions behind the learner; checked when the batch is assembled (0 keeps
        everything).
      max_rows: most rows one segment may have (``None``: limited by the wire cap only).
      on_nonfinite: ``"drop"`` or ``"raise"`` for segments holding NaN or Inf.
      idle_rows: segments carry per-step validity flags (``valid`` ``[rows, T]`` bool),
        passed on as ``Trajectory.valid``; without, ``Trajectory.valid`` is ``None``.
      host: interface to bind, or ``jaxsrl.streams.sockets.INPROC`` (serial mode).
      curve: ``(public, secret)`` server keys to require CURVE on the socket, or ``None``.
    """

    segment_length: int
    batch_segments: int
    max_staleness: int = 0
    max_rows: int | None = None
    on_nonfinite: str = "drop"
    idle_rows: bool = False
    host: str = "127.0.0.1"
    curve: tuple | None = None


class TrainerStart(NamedTuple):
    """Where a trainer starts: its learner state (on device), RNG key and policy version
    (0, or the restored one)."""

    state: Any
    rng: jax.Array
    version: int = 0


class TrainerWorker(LearnerRequests, Worker):
    """Learner thread of one policy (lifecycle: :class:`~jaxsrl.core.worker.Worker`).

    Metrics per update: the agent's ``learn`` metrics, ``staleness_mean``/``_max`` and
    the per-stage timers ``learner/update_ms``, ``learner/batch_wait_ms`` and
    ``learner/publish_ms`` (see :mod:`jaxsrl.experiment.metrics`).

    Args:
      name: worker name (logs, errors).
      policy: policy name under which parameters are published.
      learn: ``learn(state, trajectory, rng)`` already jitted over the devices.
      put_batch: places a host batch on the devices (split along the batch axis).
      start: the initial (or restored) learner state, RNG key and policy version
        (:class:`TrainerStart`; ``state.params`` is served).
      spec: per-row observation and action spaces (validate segments).
      settings: batch shape, admission rules and socket (:class:`TrainerSettings`).
      store, metrics: shared with the policy workers and the launcher.
      initial_carry: the agent's ``initial_carry`` (describes carry arrays in segments).
      checkpointer: where to save, or ``None``.
      actors: the run's actor table; segments whose ids it does not accept are dropped
        (``None``: any integer ids are accepted).
      context: ZeroMQ context of the socket (default: the process-wide one).
      before_update: ``before_update(stop_event) -> bool``, called when a batch is ready,
        before each update; ``False`` skips it and stops the worker (multi-process
        learners: :class:`jaxsrl.parallel.distributed.Lockstep`).

    Raises:
      ValueError: ``settings.on_nonfinite`` is neither ``"drop"`` nor ``"raise"``.

    Attributes:
      drops: the :class:`~jaxsrl.streams.admission.DropLog` of refused segments (its
        ``recent()`` records say why each was dropped).

    Metrics also count ``segments_received`` (every message read off the sample socket,
    valid or not) and the drops by cause (``dropped_segments``,
    ``stale_run_segments_dropped``, ``nonfinite_segments_dropped``, ...).
    """

    #: The sample stream's queues, which bound the segments in flight (back-pressure):
    #: segments queued per actor connection here (RCVHWM) and in each actor's sample socket
    #: (SNDHWM, sent in the actors' stream specs), and the kernel socket buffers in bytes
    #: (SO_RCVBUF here, SO_SNDBUF there; -1: the OS default, autotuned up to megabytes).
    #: 64 KiB: the OS default lets the kernel buffers hold dozens of segments, which
    #: raises staleness (measured: ``docs/benchmarks.md``, "All of issue 19 together").
    sample_recv_hwm: int = 4
    sample_send_hwm: int = 2
    sample_buffer_bytes: int = 65536

    def __init__(self, name: str, policy: str, learn: Callable, put_batch: Callable,
                 start: TrainerStart, spec: EnvSpec, settings: TrainerSettings,
                 store: ParameterStore, metrics: MetricsAccumulator, *,
                 initial_carry: Callable[[int], Any] = lambda n: None,
                 checkpointer: Checkpointer | None = None, actors: ActorTable | None = None,
                 context: zmq.Context | None = None,
                 before_update: Callable[[threading.Event], bool] | None = None):
        on_nonfinite = settings.on_nonfinite
        if on_nonfinite not in ("drop", "raise"):
            raise ValueError(f"on_nonfinite={on_nonfinite!r} must be 'drop' or 'raise'")
        observation_space, action_space = spec.observation_space, spec.action_space
        segment_length, max_rows = settings.segment_length, settings.max_rows
        self.settings = settings
        super().__init__(name)
        self.policy = policy
        # actors and on_nonfinite live in the segment gate below
        self._context, self._curve = context, settings.curve
        self._before_update = before_update
        self._learn, self._put_batch = learn, put_batch
        self.state, self.rng, self.version = start.state, start.rng, start.version
        self._carry = CarryCodec(initial_carry)
        self._schema = segment_schema(observation_space, action_space, segment_length, self._carry,
                                      settings.idle_rows)
        self._observation_space = observation_space
        self.batch_segments = settings.batch_segments
        self.T = segment_length
        self.max_rows = max_rows
        # The sample stream's admission rules, shared with buffer processes.
        self.gate = SegmentGate(self._schema, segment_length, max_rows, actors, metrics,
                                on_nonfinite, name, log, nonfinite_error=NonFiniteError)
        self.max_bytes, self.max_frame_bytes = self.gate.max_bytes, self.gate.max_frame_bytes
        self.drops = self.gate.drops
        self._finite = jax.jit(_all_finite)
        self.store, self.metrics, self.checkpointer = store, metrics, checkpointer
        self.max_staleness, self.host = settings.max_staleness, settings.host
        self._pending: list[dict] = []
        self._pending_rows = 0
        self._waiting_since = time.perf_counter()  # for learner/batch_wait_ms
        self.checkpoint_requested = threading.Event()
        self.extra_meta: dict = {}  # run counters saved with checkpoints (set by the launcher)
        self._requests = RequestQueue(name)  # run between updates (run_between_updates)
        self._min_version = 0  # actions older than this came from replaced parameters
        metrics.set_version(policy, start.version)  # before publishing: param_lag >= 0
        store.publish(policy, start.version, start.state.params)

    def _example_batch(self) -> Trajectory:
        """A zero batch of the configured shape (for ahead-of-time compilation)."""
        B = self.batch_segments
        zeros = {k: np.zeros((B,) + s.shape[1:], s.dtype) for k, s in self._schema.items()}
        return self._trajectory(zeros)

    def _trajectory(self, host: dict) -> Trajectory:
        return to_trajectory(host, self._observation_space, self._carry)

    def warmup(self) -> None:
        """Compile ``learn`` for the batch shape before any sample arrives."""
        example = self._put_batch(self._example_batch())
        self._learn = self._learn.lower(self.state, example, self.rng).compile()

    def _run(self) -> None:
        """Learn until ``stop`` is set (``run()`` calls this; exceptions end up in ``error``)."""
        # A small queue: backpressure bounds staleness. Bigger frames: disconnect.
        sock = open_socket(self._context, zmq.PULL, recv_hwm=self.sample_recv_hwm,
                           recv_buffer_bytes=self.sample_buffer_bytes,
                           max_frame_bytes=self.max_frame_bytes, curve_server=self._curve)
        try:
            self.address = bind(sock, self.host, name=self.name)
            self.gate.drops.where = self.address  # named in every drop's log line
            self.ready.set()  # actors may connect while we compile
            self.warmup()
            self.start_serving()
            self._waiting_since = time.perf_counter()
            while not self.stop.is_set():
                self.beat()
                self._requests.serve()
                if self.checkpoint_requested.is_set():
                    self.save_checkpoint()
                self.turn(sock)
        finally:
            sock.close()
            self._requests.close()

    def _replace_state(self, state: Any) -> int:
        check_same_layout(self.state, state, f"{self.name}: request_replace")
        self.state = state
        self.version += 1
        self._min_version = self.version
        if self._pending_rows:
            self.metrics.count("replaced_rows_dropped", self._pending_rows)
        self._pending, self._pending_rows = [], 0
        self.metrics.set_version(self.policy, self.version)  # before publishing: param_lag >= 0
        self.store.publish(self.policy, self.version, self.state.params)
        return self.version

    def turn(self, sock: zmq.Socket) -> None:
        """One turn of the learner loop: take a segment if one comes within 100 ms, then
        run every update a whole batch allows (off-policy learners override this:
        ``jaxsrl/workers/learner/replay_trainer.py``). Public for driving the worker step
        by step (tests, debugging); its thread calls it in a loop."""
        if sock.poll(100):
            self._receive(sock.recv_multipart(copy=False))
            while self._batch_ready() and not self.stop.is_set():
                if self._before_update is not None and not self._before_update(self.stop):
                    self.stop.set()
                    break
                self.update()
                self._requests.serve()

    @property
    def pending_rows(self) -> int:
        """Rows (segments) received and kept for the next batch, not yet learned from."""
        return self._pending_rows

    def _receive(self, frames: list) -> None:
        self.metrics.count("segments_received")
        self.gate.version = self.version
        admitted = self.gate.admit(frames)
        if admitted is None:
            return
        msg, episodes = admitted
        for episode in episodes:
            team = episode.get("team")
            self.metrics.add_episode(episode)
            if isinstance(team, str):
                # Per team only the return and length (the env's statistics are per game).
                self.metrics.add_episode({k: episode[k] for k in ("return", "length") if k in episode},
                                         suffix=f"/{team}")
        oldest = int(msg.arrays["version"].min())
        if oldest < self._min_version:  # acted by parameters that request_replace replaced
            self.metrics.count("replaced_segments_dropped")
            return
        if self.max_staleness and self.version - oldest > self.max_staleness:
            self.metrics.count("stale_segments_dropped")
            return
        self._accept(msg.arrays)

    def _accept(self, arrays: dict) -> None:
        """Keep a valid segment's arrays (``[rows, ...]``) for the next batches."""
        self._pending.append(arrays)
        self._pending_rows += len(arrays["reward"])

    def _batch_ready(self) -> bool:
        """Drop pending rows too stale for the next update; is a whole batch left?"""
        if self.max_staleness and self._pending:
            oldest = np.concatenate([p["version"].min(axis=1) for p in self._pending])  # [rows]
            keep = self.version - oldest <= self.max_staleness
            if not keep.all():
                joined = {k: np.concatenate([p[k] for p in self._pending])[keep]
                          for k in self._pending[0]}
                self.metrics.count("stale_rows_dropped", int((~keep).sum()))
                self._pending = [joined] if keep.any() else []
                self._pending_rows = int(keep.sum())
        return self._pending_rows >= self.batch_segments

    def _take_batch(self) -> dict:
        B = self.batch_segments
        joined = {k: np.concatenate([p[k] for p in self._pending]) for k in self._pending[0]}
        rest = {k: v[B:] for k, v in joined.items()}
        self._pending = [rest] if len(rest["reward"]) else []
        self._pending_rows = len(rest["reward"])
        return {k: v[:B] for k, v in joined.items()}

    def skip_nonfinite_update(self) -> None:
        """An update produced NaN or Inf in the learner state: keep the previous state,
        publish nothing, log and count it (``nonfinite_updates_skipped``)."""
        log.warning("%s: update %d produced NaN/Inf in the learner state; skipped it "
                    "(previous parameters kept, nothing published)", self.name, self.version + 1)
        self.metrics.count("nonfinite_updates_skipped")
        self._waiting_since = time.perf_counter()

    def learn_replay_batch(self, batch: Any, key: jax.Array) -> tuple[dict, Any] | None:
        """``learn`` on one replay batch (off-policy learners): keep the new state and
        count the new version, or skip a non-finite result (``None``). Returns the host
        metrics and the batch's new priorities (as ``learn`` returned them, on device)."""
        state, metrics, priorities = self._learn(self.state, self._put_batch(batch), key)
        finite, metrics = jax.device_get((self._finite(state), metrics))
        if not bool(finite):
            self.skip_nonfinite_update()
            return None
        self.state = state
        self.version += 1
        return metrics, priorities

    def update(self) -> None:
        """One ``learn`` call on the next ``batch_segments`` pending rows, then publish the
        new parameters as the next policy version (a non-finite result is skipped and
        counted). Called by the loop when a whole batch is pending."""
        t0 = time.perf_counter()
        self.metrics.add_means({"learner/batch_wait_ms": 1e3 * (t0 - self._waiting_since)})
        host = self._take_batch()
        staleness = self.version - host["version"]
        traj = self._trajectory(host)
        self.rng, key = jax.random.split(self.rng)
        state, metrics = self._learn(self.state, self._put_batch(traj), key)
        if not bool(self._finite(state)):
            # Keep the previous state; the batch is consumed (learning from it again
            # would likely fail again).
            self.skip_nonfinite_update()
            return
        self.state = state
        self.version += 1
        t1 = time.perf_counter()
        self.metrics.set_version(self.policy, self.version)  # before publishing: param_lag >= 0
        self.store.publish(self.policy, self.version, self.state.params)
        t2 = time.perf_counter()
        metrics = jax.device_get(metrics)
        self.metrics.add_means({k: float(v) for k, v in metrics.items()})
        self.metrics.add_means({"staleness_mean": float(staleness.mean()),
                                "staleness_max": float(staleness.max()),
                                "learner/update_ms": 1e3 * (t2 - t0),
                                "learner/publish_ms": 1e3 * (t2 - t1)})
        self._waiting_since = time.perf_counter()

    def save_checkpoint(self) -> None:
        """Save state, RNG and counters now (called between updates), with the items of
        :meth:`_checkpoint_extra` beside them."""
        self.checkpoint_requested.clear()
        if self.checkpointer is None or self.checkpointer.latest_step() == self.version:
            return
        tree = {"agent": self.state, "rng": self.rng}
        meta = {"policy_version": self.version, **self.extra_meta,
                "env_steps": self.metrics.env_steps}
        extra = self._checkpoint_extra(meta)
        self.checkpointer.save(self.version, tree, meta, *([extra] if extra else []))

    def _checkpoint_extra(self, meta: dict) -> dict:
        """Further checkpoint items (name -> pytree) and counters added to ``meta``:
        none here (off-policy learners add their replay)."""
        return {}
