"""The host side of an off-policy agent on device actors: builds and compiles the step
of :mod:`jaxsrl.workers.device.offpolicy`, keeps its replay state on the device between
steps, and counts, as exact integers, the items inserted and the ``learn`` calls due
(:func:`~jaxsrl.workers.device.offpolicy.updates_due`, the CPU path's plan), never more
than the run's planned learn calls.

The replay is not checkpointed (the CPU path's default; ``--save_replay`` is refused
with device actors): a resumed run starts an empty replay, refills it up to
``min_fill`` items, then learns at the replay ratio again, and logs that it does, as
:class:`~jaxsrl.workers.learner.replay_trainer.ReplayTrainer` does without saved
replay contents.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxsrl.core.agent import AgentFns
from jaxsrl.experiment import events
from jaxsrl.parallel import devices
from jaxsrl.workers.buffer.replay import Replay
from jaxsrl.workers.device.offpolicy import (empty_replay, jit_offpolicy_step,
                                             make_offpolicy_step, updates_due)

log = logging.getLogger("jaxsrl")


class OffPolicySteps:
    """``steps(state, env_carry, rng, version) -> (state, env_carry, rng, metrics, stats,
    health, updates)``: one compiled off-policy step (rollout, insert, the ``updates``
    learn calls due), the replay carried inside.

    Args:
      fns: the off-policy agent's functions.
      rollout: :func:`~jaxsrl.workers.device.rollout.make_rollout`'s function.
      mesh: the local devices (environments split, replay and learner state replicated).
      items_per_step: ``N * T``.
      planned_updates: the run's planned learn calls (beta schedule horizon).
      example: ``(state, env_carry, rng)`` placed as the loop passes them, to compile for.
      done_updates: learn calls the learner state has seen already (its restored policy
        version): the steps run at most ``planned_updates - done_updates`` more.

    ``metrics`` holds the step's device metrics plus the host's ``replay/size``,
    ``replay/inserts``, ``replay/samples``, ``replay/ratio`` (samples per item inserted
    after ``min_fill``, Reverb's achieved ratio) and ``replay/updates`` (learn calls of
    this step), counted since this buffer was made.

    Raises:
      ValueError: as :func:`~jaxsrl.workers.device.offpolicy.make_offpolicy_step`.
    """

    def __init__(self, fns: AgentFns, rollout: Callable, mesh: Mesh, items_per_step: int,
                 planned_updates: int, example: tuple, done_updates: int = 0):
        state, env_carry, rng = example
        self.spec, self.items_per_step = fns.replay, items_per_step
        traj = jax.eval_shape(rollout, state.params, env_carry, rng, jnp.int32(0))[1]
        items = jax.eval_shape(fns.to_items, traj)[0]
        one = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), items)
        replay = Replay(self.spec, one, device=mesh.devices.flat[0])
        step, self.max_updates = make_offpolicy_step(rollout, fns, replay, planned_updates,
                                                     items_per_step, mesh)
        self.replay = empty_replay(replay, devices.replicated(mesh))  # replay's own buffer is never made
        self._step = jit_offpolicy_step(step, mesh).lower(
            state, env_carry, self.replay, rng, jnp.int32(0), jnp.int32(0)).compile()
        self.inserted = self.updates = 0  # in this buffer: items written, learn calls run
        self.left = max(0, planned_updates - done_updates)  # learn calls the plan still allows

    def __call__(self, state: Any, env_carry: Any, rng: jax.Array, version: int) -> tuple:
        self.inserted += self.items_per_step
        todo = min(updates_due(self.inserted, self.spec) - self.updates, self.left)
        if not 0 <= todo <= self.max_updates:  # never: see offpolicy.max_updates
            raise RuntimeError(f"{todo} learn calls due in one step, the step runs at most "
                               f"{self.max_updates}")
        if todo and not self.updates:
            log.info("device actors: replay holds %d items: learning starts",
                     min(self.inserted, self.spec.capacity))
        self.updates += todo
        self.left -= todo
        state, env_carry, self.replay, rng, metrics, stats, health = self._step(
            state, env_carry, self.replay, rng, jnp.int32(version), jnp.int32(todo))
        samples = self.updates * self.spec.batch_size
        after = self.inserted - self.spec.min_fill
        metrics = dict(metrics) | {
            "replay/size": float(min(self.inserted, self.spec.capacity)),
            "replay/inserts": float(self.inserted), "replay/samples": float(samples),
            "replay/ratio": samples / after if after > 0 else 0.0,
            "replay/updates": float(todo)}
        return state, env_carry, rng, metrics, stats, health, todo

    def log_refill(self, policy: str, version: int) -> None:
        """Say that a resumed run refills its replay (it is not checkpointed)."""
        events.emit(log, logging.INFO, "replay_refill",
                    {"learner": policy, "step": version, "reason": "not saved"},
                    "%s: device actors do not checkpoint the replay: refilling it, learning "
                    "resumes at %d items", policy, self.spec.min_fill)
