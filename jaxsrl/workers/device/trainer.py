"""Device trainer: the learner of a run whose actors are on the device (Podracer's Anakin;
``docs/device_actors.md``), with the face a CPU trainer
(:class:`~jaxsrl.workers.learner.trainer.TrainerWorker`) shows the launcher's control
loop, so one loop (:mod:`jaxsrl.launch.control`) runs both placements.

Its thread runs compiled rollout-and-learn steps
(:func:`jaxsrl.workers.device.fused.make_fused_step`, or the off-policy step of
:class:`~jaxsrl.workers.device.offpolicy_steps.OffPolicySteps`) one after another, and
between two steps does what a CPU trainer does between updates: serves requests of
other threads (:meth:`run_between_updates`; the population manager), saves a
checkpoint when asked (``checkpoint_requested``), beats, and stops when ``stop`` is set.

Contract (the CPU trainer's, ``docs/reliability.md``):

* counts are exact: a step is started only while the env steps started are below
  ``total_env_steps`` (the last step ends less than one step past it), so the run makes
  exactly its planned learn calls; a checkpoint records the policy version and env
  steps its state has seen (the steps in flight are counted first);
* non-finite values: a step whose trajectory or new learner state holds NaN or Inf
  keeps the previous state (decided inside the compiled step,
  :mod:`jaxsrl.workers.device.finite`); ``on_nonfinite="drop"`` counts it
  (``nonfinite_updates_skipped``, and the rows as ``nonfinite_segments_dropped``),
  ``"raise"`` stops the trainer with :class:`~jaxsrl.workers.learner.trainer.NonFiniteError`
  naming the field, so the run stops without checkpointing such a state;
* a compiled call is never interrupted: a stop request (Ctrl-C, SIGTERM, the run's end)
  is seen between two steps, so the state handed to the final checkpoint is whole.

One step's results are counted while the next runs (at most one step in flight).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxsrl.core.worker import Worker
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.workers.device.fused import (jit_fused_step, make_fused_step, own_buffers,
                                         put_env_carry)
from jaxsrl.workers.device.offpolicy_steps import OffPolicySteps
from jaxsrl.workers.device.rollout import finished_episodes, initial_rollout_carry, make_rollout
from jaxsrl.workers.learner.requests import LearnerRequests, RequestQueue, check_same_layout
from jaxsrl.workers.learner.trainer import NonFiniteError, TrainerStart

log = logging.getLogger("jaxsrl.trainer")


@dataclasses.dataclass(frozen=True)
class DeviceSettings:
    """What a device trainer's loop needs of the run config.

    Attributes:
      num_envs: ``N`` environments per member (``batch_segments``), one row each.
      segment_length: ``T`` steps per rollout.
      total_env_steps: no step starts once this many env steps were started (the run's
        count: all members together).
      planned_updates: learn calls over the run (off-policy: the replay plan's cap).
      on_nonfinite: ``"drop"`` or ``"raise"``.
      env_seed: environments of a (re)start reset from
        ``fold_in(PRNGKey(env_seed + 1000 * member), version)``.
    """

    num_envs: int
    segment_length: int
    total_env_steps: int
    planned_updates: int
    on_nonfinite: str = "drop"
    env_seed: int = 1

    def __post_init__(self):
        if self.on_nonfinite not in ("drop", "raise"):
            raise ValueError(f"on_nonfinite={self.on_nonfinite!r} must be 'drop' or 'raise'")


def nonfinite_message(name: str, version: int, health: dict, rows: int) -> str | None:
    """A one-line description of what one step's ``health`` (host values of
    :func:`~jaxsrl.workers.device.finite.health`) found, or ``None`` if all was finite."""
    bad = {k[4:]: int(v) for k, v in health.items() if k.startswith("bad/") and k != "bad/any"}
    fields = ", ".join(f"{k} in {n} of {rows} rows" for k, n in bad.items() if n)
    if fields:
        return f"{name}: NaN or Inf in the trajectory of update {version}: {fields}"
    if int(health["skipped"]):
        return f"{name}: update {version} produced NaN or Inf in the learner state"
    return None


class DeviceLearner(LearnerRequests, Worker):
    """The loop shared by :class:`DeviceTrainer` and the population's
    (:class:`~jaxsrl.workers.device.population_trainer.DevicePopulationTrainer`).

    Subclasses implement :meth:`_build` (compile; in the worker's thread), :meth:`_launch`
    (start one step, return what :meth:`_count` needs), :meth:`_count` (add a finished
    step to the metrics) and :meth:`save_checkpoint`.

    Attributes:
      env_steps: env steps started so far (the restored count plus this run's steps).
      steps_per_call: env steps one step adds to the run (all members).
      longest_call_s: the longest wall-clock seconds one step took until it was counted
        (the launcher waits at least twice this for the learner to stop).
    """

    def __init__(self, name: str, settings: DeviceSettings, env_steps: int, steps_per_call: int):
        super().__init__(name)
        self.settings = settings
        self.env_steps, self.steps_per_call = env_steps, steps_per_call
        self.checkpoint_requested = threading.Event()
        self.extra_meta: dict = {}  # run counters saved with checkpoints (set by the launcher)
        self._requests = RequestQueue(name)
        self._queued: list = []
        self.longest_call_s = 0.0
        self._last_counted = time.perf_counter()

    # -- to implement ----------------------------------------------------------------
    def _build(self) -> None:
        raise NotImplementedError

    def _launch(self) -> Any:
        raise NotImplementedError

    def _count(self, item: Any) -> None:
        raise NotImplementedError

    def save_checkpoint(self) -> None:
        raise NotImplementedError

    def _checkpoints_due(self) -> bool:
        return self.checkpoint_requested.is_set()

    def _save_requested(self) -> None:
        self.save_checkpoint()

    # -- the loop --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.ready.set()
            t0 = time.perf_counter()
            self._build()
            log.info("device actors: %s's rollout-and-learn step compiled in %.1f s", self.name,
                     time.perf_counter() - t0)
            self.start_serving()
            self._last_counted = time.perf_counter()
            while not self.stop.is_set():
                self.beat()
                if self._requests.pending():
                    self.drain()
                    self._requests.serve()
                if self._checkpoints_due():
                    self._save_requested()
                if self.env_steps < self.settings.total_env_steps:
                    self._queued.append(self._launch())
                    self.env_steps += self.steps_per_call
                    while len(self._queued) > 1:
                        self._count(self._queued.pop(0))  # blocks until that step finished
                        now = time.perf_counter()
                        self.longest_call_s = max(self.longest_call_s, now - self._last_counted)
                        self._last_counted = now
                else:  # the budget is spent: count the last step, then wait for the stop
                    self.drain()
                    self.stop.wait(0.02)
            self.drain()
        finally:
            self._requests.close()

    def drain(self) -> None:
        """Count every step in flight (blocks until they finished)."""
        while self._queued:
            self._count(self._queued.pop(0))

    def _check_health(self, name: str, version: int, health: dict, metrics: Any) -> int:
        """Count (or, ``on_nonfinite="raise"``, raise) what a step's ``health`` found;
        returns its learn calls not kept."""
        message = nonfinite_message(name, version, health, self.settings.num_envs)
        if message is None:
            return 0
        if self.settings.on_nonfinite == "raise":
            raise NonFiniteError(message + " (--on_nonfinite=raise)")
        skipped = int(health["skipped"])
        log.warning("%s; skipped that update (previous learner state kept)", message)
        metrics.count("nonfinite_updates_skipped", skipped)
        if int(health["bad/any"]):
            metrics.count("nonfinite_segments_dropped", int(health["bad/any"]))
        return skipped


def add_step_metrics(metrics: Any, learn: dict, stats: Any, env_steps: int,
                     kept: bool, replay_keys: bool = False) -> None:
    """Add one counted step to ``metrics``: ``env_steps``, the rollout's finished
    episodes (``stats``, host :class:`~jaxsrl.workers.device.rollout.EpisodeStats`), and
    ``learn``'s means if its update was ``kept`` (``replay/`` keys always, with
    ``replay_keys``); staleness 0 on-policy, the replay's sampled age off-policy."""
    metrics.add_env_steps(env_steps)
    metrics.add_episodes(*finished_episodes(stats))
    means = {k: float(v) for k, v in learn.items() if kept or (replay_keys and k.startswith("replay/"))}
    if kept:
        for key in ("staleness_mean", "staleness_max"):
            means[key] = means.get(f"replay/{key}", 0.0)
    metrics.add_means(means)


class DeviceTrainer(DeviceLearner):
    """The device learner of one policy.

    Args:
      name, policy: the trainer's and its policy's names.
      fns: the agent's functions (``init``'s state is ``start.state``).
      env: the batched JAX-native environment (:mod:`jaxsrl.envs.jax_native`).
      mesh: the local devices (environments split over them, learner state replicated).
      start: the initial or restored state, RNG key and version
        (:class:`~jaxsrl.workers.learner.trainer.TrainerStart`).
      settings: :class:`DeviceSettings`.
      metrics: where the steps are counted (the run's accumulator).
      env_steps: env steps the restored state has seen (0 on a fresh start).
      checkpointer: where :meth:`save_checkpoint` saves ``{"agent", "rng"}``, or ``None``.
      compiled: a future of :func:`compile_fused_step`'s result (on-policy agents),
        started before the initial state was built so both compile at once; ``None``:
        compiled in the worker's thread.
    """

    def __init__(self, name: str, policy: str, fns: Any, env: Any, mesh: Any,
                 start: TrainerStart, settings: DeviceSettings, metrics: Any, *,
                 env_steps: int = 0, checkpointer: Checkpointer | None = None,
                 compiled: concurrent.futures.Future | None = None):
        super().__init__(name, settings, env_steps, settings.num_envs * settings.segment_length)
        self.compiled = compiled  # the on-policy step, compiled ahead (compile_fused_step)
        self.policy, self.fns, self.env, self.mesh = policy, fns, env, mesh
        # every leaf in a buffer of its own: the step donates the state, and an agent's
        # init may hand one array out twice (DQN's target network starts as its online one)
        self.state = own_buffers(start.state)
        self.rng, self.version = start.rng, start.version
        self.metrics, self.checkpointer = metrics, checkpointer
        self.offpolicy = fns.replay is not None
        metrics.set_version(policy, start.version)

    def _build(self) -> None:
        s = self.settings
        key = jax.random.fold_in(jax.random.PRNGKey(s.env_seed), self.version)
        # Fresh episodes on every (re)start, as restarted actor processes begin them.
        self.env_carry = put_env_carry(initial_rollout_carry(
            self.env, key, s.num_envs, self.fns.initial_carry), self.mesh)
        rollout = make_rollout(self.env, self.fns.act, s.segment_length, self.fns.initial_carry)
        if not self.offpolicy:  # rollout then learn, one version per step
            step = self.compiled.result() if self.compiled is not None else \
                compile_fused_step(self.env, self.fns, s, self.mesh)
            self._step: Callable = lambda *a: (*step(*a[:3], jnp.int32(a[3])), 1)
        else:  # rollout, insert into the device replay, the learn calls due
            self._step = OffPolicySteps(self.fns, rollout, self.mesh, self.steps_per_call,
                                        s.planned_updates, (self.state, self.env_carry, self.rng),
                                        done_updates=self.version)
            if self.version:  # a resumed run: its replay was not saved
                self._step.log_refill(self.policy, self.version)

    def _launch(self) -> Any:
        self.state, self.env_carry, self.rng, learn, stats, health, updates = self._step(
            self.state, self.env_carry, self.rng, self.version)
        self.version += updates  # kept learn calls: corrected when counted
        return learn, stats, health, updates, self.version

    def _count(self, item: Any) -> None:
        learn, stats, health, updates, version = item
        learn, stats, health = jax.device_get((learn, stats, health))
        skipped = self._check_health(self.name, version, health, self.metrics)
        self.version -= skipped
        add_step_metrics(self.metrics, learn, stats, self.steps_per_call,
                         kept=updates > skipped, replay_keys=self.offpolicy)
        self.metrics.set_version(self.policy, self.version)

    def _replace_state(self, state: Any) -> int:
        check_same_layout(self.state, state, f"{self.name}: request_replace")
        self.state = own_buffers(state)
        self.version += 1
        self.metrics.set_version(self.policy, self.version)
        return self.version

    def save_checkpoint(self) -> None:
        """Save ``{"agent": state, "rng": rng}`` as the current version (the steps in
        flight counted first), with ``policy_version`` and ``env_steps`` in its metadata;
        nothing if that version is saved already."""
        self.checkpoint_requested.clear()
        self.drain()
        if self.checkpointer is None or self.checkpointer.latest_step() == self.version:
            return
        tree = jax.device_get({"agent": self.state, "rng": self.rng})  # host copies: donated next
        meta = {"policy_version": self.version, **self.extra_meta, "env_steps": self.env_steps}
        self.checkpointer.save(self.version, tree, meta)


def compile_fused_step(env: Any, fns: Any, settings: DeviceSettings, mesh: Any) -> Callable:
    """The on-policy rollout-and-learn step of ``fns`` on ``env`` compiled for ``mesh``
    from abstract shapes only (``jax.eval_shape`` of ``fns.init`` and of the envs' reset:
    nothing is computed), so it can compile while the initial state is being made."""
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(fns.init, key)
    carry = jax.eval_shape(lambda k: initial_rollout_carry(
        env, k, settings.num_envs, fns.initial_carry), key)
    rollout = make_rollout(env, fns.act, settings.segment_length, fns.initial_carry)
    return jit_fused_step(make_fused_step(rollout, fns.learn), mesh).lower(
        state, carry, jax.ShapeDtypeStruct(key.shape, key.dtype),
        jax.ShapeDtypeStruct((), jnp.int32)).compile()
