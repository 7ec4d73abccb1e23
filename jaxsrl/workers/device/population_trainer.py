"""The device learner of a ``--population`` (``docs/device_actors.md``, "Populations and
PBT"): the members' learner states stacked along a member axis and one compiled call
(:func:`jaxsrl.workers.device.population.jit_population_step`) rolling out and training
every member on its own ``num_envs`` environments.

The launcher sees each member as a trainer (:class:`MemberHandle`: ``policy``,
``version``, ``state``, ``metrics``, ``checkpointer``, ``checkpoint_requested``,
``run_between_updates``, ``request_replace``, ``snapshot``), so the population manager
(:class:`~jaxsrl.workers.population.manager.PopulationManager`), the periodic checkpoints
and evaluation and the shutdown treat a device population as a CPU one. A member's
requests run in the population's thread between two compiled steps; an exploit writes
the copied state into the member's slice of the stack and bumps its policy version.
Hyperparameters are learner-state leaves (``[M]`` float32 stacked), so nothing is
recompiled.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.parallel import devices
from jaxsrl.workers.device.fused import make_fused_step
from jaxsrl.workers.device.population import (jit_population_step, make_population_step,
                                              member, member_env_sharding, set_member, stack)
from jaxsrl.workers.device.rollout import EpisodeStats, initial_rollout_carry, make_rollout
from jaxsrl.workers.device.trainer import DeviceLearner, DeviceSettings, add_step_metrics
from jaxsrl.workers.learner.requests import LearnerRequests, check_same_layout
from jaxsrl.workers.learner.trainer import TrainerStart


class MemberHandle(LearnerRequests):
    """Member ``index`` of a :class:`DevicePopulationTrainer` as the launcher and the
    population manager see a trainer (module docstring). Its requests run in the
    population's thread (``_requests`` is the population's queue).

    Attributes:
      worker: the population's learner (the thread behind every member).
    """

    def __init__(self, worker: "DevicePopulationTrainer", index: int, policy: str,
                 metrics: Any, checkpointer: Any):
        self.worker, self.index, self.policy, self.name = worker, index, policy, policy
        self.metrics, self.checkpointer = metrics, checkpointer
        self.checkpoint_requested = threading.Event()
        self._requests = worker._requests

    @property
    def stop(self) -> threading.Event:
        return self.worker.stop

    @property
    def version(self) -> int:
        """The member's policy version."""
        return int(self.worker.versions[self.index])

    @property
    def state(self) -> Any:
        """The member's learner state (its slice of the stack)."""
        return member(self.worker.state, self.index)

    @state.setter
    def state(self, value: Any) -> None:
        self.worker.state = devices.put_replicated(
            set_member(self.worker.state, self.index, value), self.worker.mesh)

    def _replace_state(self, state: Any) -> int:
        check_same_layout(self.state, state, f"{self.name}: request_replace")
        self.state = state
        self.worker.versions[self.index] += 1
        self.metrics.set_version(self.policy, self.version)
        return self.version


class DevicePopulationTrainer(DeviceLearner):
    """The stacked members' device learner.

    Args:
      name: the worker's name.
      policies: the members' policy names, in member order.
      fns: the agent's functions (every member's; schedules planned over a member's share).
      env, mesh: as :class:`~jaxsrl.workers.device.trainer.DeviceTrainer`'s.
      starts: each member's :class:`~jaxsrl.workers.learner.trainer.TrainerStart`.
      settings: :class:`~jaxsrl.workers.device.trainer.DeviceSettings` (``num_envs`` per member).
      metrics: each member's metrics (``population.metrics_for(member)``).
      checkpointers: each member's checkpointer.
      env_steps: env steps (all members) the restored states have seen.

    Raises:
      ValueError: an off-policy agent (a device population runs on-policy agents).
    """

    def __init__(self, name: str, policies: Sequence[str], fns: Any, env: Any, mesh: Any,
                 starts: Sequence[TrainerStart], settings: DeviceSettings,
                 metrics: Sequence[Any], checkpointers: Sequence[Any], *, env_steps: int = 0):
        if fns.replay is not None:
            raise ValueError("a device population runs on-policy agents only")
        n = len(policies)
        super().__init__(name, settings, env_steps, n * settings.num_envs * settings.segment_length)
        self.fns, self.env, self.mesh = fns, env, mesh
        self.state = devices.put_replicated(stack([s.state for s in starts]),
                                            mesh)
        self.rng = devices.put_replicated(stack([s.rng for s in starts]), mesh)
        self.versions = np.array([s.version for s in starts], np.int64)
        self.handles = [MemberHandle(self, i, p, m, c)
                        for i, (p, m, c) in enumerate(zip(policies, metrics, checkpointers))]
        for h in self.handles:
            h.metrics.set_version(h.policy, h.version)

    def _build(self) -> None:
        s = self.settings
        carries = [initial_rollout_carry(  # fresh episodes, each member on its own envs
            self.env, jax.random.fold_in(jax.random.PRNGKey(s.env_seed + 1000 * i), h.version),
            s.num_envs, self.fns.initial_carry) for i, h in enumerate(self.handles)]
        self.env_carry = jax.device_put(stack(carries), member_env_sharding(self.mesh))
        rollout = make_rollout(self.env, self.fns.act, s.segment_length, self.fns.initial_carry)
        step = jit_population_step(make_population_step(make_fused_step(rollout, self.fns.learn)),
                                   self.mesh)
        self._step = step.lower(self.state, self.env_carry, self.rng,
                                jnp.asarray(self.versions, jnp.int32)).compile()

    def _launch(self) -> Any:
        self.state, self.env_carry, self.rng, learn, stats, health = self._step(
            self.state, self.env_carry, self.rng, jnp.asarray(self.versions, jnp.int32))
        self.versions += 1  # corrected when counted
        return learn, stats, health, self.versions.copy()

    def _count(self, item: Any) -> None:
        learn, stats, health, versions = item
        learn, stats, health = jax.device_get((learn, stats, health))
        for i, h in enumerate(self.handles):
            one = lambda tree: jax.tree.map(lambda x: x[i], tree)  # noqa: E731
            skipped = self._check_health(h.name, int(versions[i]), one(health), h.metrics)
            self.versions[i] -= skipped
            add_step_metrics(h.metrics, one(learn), EpisodeStats(*one(tuple(stats))),
                             self.steps_per_call // len(self.handles), kept=not skipped)
            h.metrics.set_version(h.policy, h.version)

    def _checkpoints_due(self) -> bool:
        return any(h.checkpoint_requested.is_set() for h in self.handles)

    def _save_requested(self) -> None:
        """Checkpoint the members whose ``checkpoint_requested`` is set."""
        self._save([h for h in self.handles if h.checkpoint_requested.is_set()])

    def save_checkpoint(self) -> None:
        """Checkpoint every member (the run's end)."""
        self._save(self.handles)

    def _save(self, which: Sequence[MemberHandle]) -> None:
        """Save each of ``which``'s ``{"agent", "rng"}`` as its current version (the steps
        in flight counted first), unless that version is saved already."""
        self.drain()
        for h in which:
            h.checkpoint_requested.clear()
            if h.checkpointer is None or h.checkpointer.latest_step() == h.version:
                continue
            tree = jax.device_get({"agent": h.state, "rng": self.rng[h.index]})
            meta = {"policy_version": h.version, **self.extra_meta, "env_steps": self.env_steps}
            h.checkpointer.save(h.version, tree, meta)
