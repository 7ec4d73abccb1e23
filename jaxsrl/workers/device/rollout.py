"""A device rollout: ``T`` steps of ``N`` JAX-native environments and the agent's own
``act`` (the pure function the inference server runs) under one ``lax.scan``, giving the
:class:`~jaxsrl.core.agent.Trajectory` the CPU actors' segments give the learner
(``jaxsrl.streams.segment.to_trajectory``): ``[N, T + 1]`` observations, terminated kept
apart from truncated, the final observation of truncated episodes, the behaviour
log-probabilities and policy versions; feed-forward agents (``carry`` ``None``,
``valid`` ``None``)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxsrl.core.agent import Trajectory
from jaxsrl.streams.spaces import action_leaf


class EpisodeStats(NamedTuple):
    """Episodes that finished during a rollout (``[]`` scalars).

    Attributes:
      count: int32 episodes finished.
      return_sum: float32 sum of their returns.
      length_sum: int32 sum of their lengths (steps).
    """

    count: jax.Array
    return_sum: jax.Array
    length_sum: jax.Array

    @staticmethod
    def zeros() -> "EpisodeStats":
        return EpisodeStats(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32),
                            jnp.zeros((), jnp.int32))

    def __add__(self, other: "EpisodeStats") -> "EpisodeStats":  # type: ignore[override]
        return EpisodeStats(*(a + b for a, b in zip(self, other)))


def make_rollout(env: Any, act: Callable, segment_length: int) -> Callable:
    """``rollout(params, env_carry, rng, version) -> (env_carry, trajectory, stats)``.

    Args:
      env: a batched pure environment (``reset(key, n)``, ``step(carry, action, key)``,
        ``action_space``; :class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv`).
      act: the agent's ``act(params, obs, carry, rng) -> (action, carry, extras)``
        (``extras["logp"]`` ``[N]`` float32); feed-forward (``carry`` stays ``None``).
      segment_length: ``T``, steps per segment.

    The returned function is pure and jittable: ``version`` is the ``[]`` int32 policy
    version of ``params`` (every step's ``policy_version``); ``trajectory`` has ``B = N``
    segments of ``T`` steps; ``stats`` the :class:`EpisodeStats` of the episodes that
    ended in it. Keys: ``rng`` is split into one key per step, each into the action's
    and the environments' keys.

    Raises:
      ValueError: ``segment_length`` < 1.
    """
    if segment_length < 1:
        raise ValueError(f"segment_length={segment_length} must be positive")
    action_dtype = jnp.dtype(action_leaf(env.action_space)[0])

    def rollout(params, env_carry, rng, version):
        def step(carry, key):
            k_act, k_env = jax.random.split(key)
            obs = carry.obs
            action, _, extras = act(params, obs, None, k_act)
            carry, out = env.step(carry, action, k_env)
            return carry, (obs, action.astype(action_dtype), extras["logp"], out)

        keys = jax.random.split(rng, segment_length)
        env_carry, (obs, action, logp, out) = jax.lax.scan(step, env_carry, keys)
        bt = lambda x: jnp.swapaxes(x, 0, 1)  # [T, N, ...] -> [N, T, ...]
        n = env_carry.episode_return.shape[0]
        traj = Trajectory(
            obs=bt(jnp.concatenate([obs, env_carry.obs[None]], axis=0)),  # [N, T + 1, *obs]
            action=bt(action),
            reward=bt(out.reward),
            terminated=bt(out.terminated),
            truncated=bt(out.truncated),
            final_obs=bt(out.final_obs),
            behaviour_logp=bt(logp.astype(jnp.float32)),
            policy_version=jnp.full((n, segment_length), version, jnp.int32),
        )
        stats = EpisodeStats(out.episode_done.sum(dtype=jnp.int32),
                             out.episode_return.sum(dtype=jnp.float32),
                             out.episode_length.sum(dtype=jnp.int32))
        return env_carry, traj, stats

    return rollout
