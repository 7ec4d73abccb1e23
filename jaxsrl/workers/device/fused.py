"""The fused rollout-and-learn step of an on-policy agent on device actors: one
compiled function rolls ``N`` environments out for ``T`` steps with the current
parameters and runs ``learn`` on that trajectory (zero staleness: every action was
chosen by the parameters being updated), sharded over the local devices like the
learner (:mod:`jaxsrl.parallel.devices`: environments split along the ``"data"`` axis,
learner state replicated).

Non-finite values are decided inside the step (:mod:`jaxsrl.workers.device.finite`): an
update whose trajectory or new learner state holds NaN or Inf is not kept (the old
state is returned) and the step's ``health`` says so; the host counts it."""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax.sharding import Mesh

from jaxsrl.parallel import devices
from jaxsrl.workers.device import finite


def make_fused_step(rollout: Callable, learn: Callable) -> Callable:
    """``step(state, env_carry, rng, version) -> (state, env_carry, rng, metrics, stats,
    health)``.

    Exactly ``rollout`` then ``learn``: ``rng`` is split into ``(rng, k_rollout,
    k_learn)``; the rollout acts with ``state.params`` at policy ``version``; ``learn``
    gets that trajectory and ``k_learn``. ``metrics`` are ``learn``'s, ``stats`` the
    rollout's :class:`~jaxsrl.workers.device.rollout.EpisodeStats`, ``health``
    :func:`~jaxsrl.workers.device.finite.health`'s: the new state is returned only if it
    and the trajectory are finite, else the old one (``health["skipped"]`` 1).
    """

    def step(state, env_carry, rng, version):
        rng, k_rollout, k_learn = jax.random.split(rng, 3)
        env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
        new_state, metrics = learn(state, traj, k_learn)
        bad = finite.bad_rows(traj)
        state_ok = finite.all_finite(new_state)
        ok = state_ok & (bad["any"] == 0)
        state = finite.keep_if(ok, new_state, state)
        return state, env_carry, rng, metrics, stats, finite.health(bad, ~ok)

    return step


def jit_fused_step(step: Callable, mesh: Mesh) -> Callable:
    """``step`` jitted over ``mesh``: the environment carry (``[N, ...]`` leaves)
    sharded along its leading axis, everything else replicated; the learner state and
    environment carry are donated (updated in place). ``N`` must be divisible by
    ``mesh.size``."""
    rep, shard = devices.replicated(mesh), devices.batch_sharded(mesh)
    return jax.jit(step, in_shardings=(rep, shard, rep, rep),
                   out_shardings=(rep, shard, rep, rep, rep, rep), donate_argnums=(0, 1))


def put_env_carry(env_carry: Any, mesh: Mesh) -> Any:
    """Place an environment carry with its leading (environment) axis split over ``mesh``,
    every leaf in a buffer of its own: a ``reset`` may hand one array out as several
    leaves (Brax's envs use one zeros array for reward, done and metrics), and the
    donated carry of :func:`jit_fused_step` must not hold a buffer twice."""
    return devices.put_batch(own_buffers(env_carry), mesh)


def own_buffers(tree: Any) -> Any:
    """``tree`` with every array leaf copied into a buffer of its own, placed as it was
    (``jax.device_put(..., may_alias=False)``: no compiled program per leaf shape, as
    ``jnp.copy`` outside ``jit`` gives), so a donating step never sees one buffer twice."""
    return jax.tree.map(lambda x: jax.device_put(x, may_alias=False), tree)
