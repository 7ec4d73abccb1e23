"""What every JAX-native adapter hands the device rollout (:class:`EnvCarry`,
:class:`StepOut`), and the batching layer shared by the adapters whose library gives a
pure ``reset``/``step`` for ONE environment without auto-reset (:class:`AutoResetEnv`:
Brax, a user's own ``--env=jax:package.module:factory``).

:class:`AutoResetEnv` vmaps such an environment over ``N`` copies and adds what the CPU
actors (:class:`jaxsrl.envs.gym_vector.GymVectorEnv`) report: auto-reset (a finished
environment starts a freshly sampled episode; new episodes are sampled only on a step
where some environment finished, ``lax.cond``), the time limit counted in the carry and
reported as ``truncated`` (``truncated and not terminated``), the final observation of
truncated episodes, and each finished episode's return and length.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any


class EnvCarry(NamedTuple):
    """What a batch of ``N`` environments carries from one step to the next.

    Attributes:
      state: the environments' own state, ``[N, ...]`` leaves.
      obs: ``[N, *obs]`` current observations (the first of an episode after a reset).
      episode_return: ``[N]`` float32 reward summed over the running episode.
      episode_length: ``[N]`` int32 steps of the running episode.
    """

    state: PyTree
    obs: PyTree
    episode_return: jax.Array
    episode_length: jax.Array


class StepOut(NamedTuple):
    """One step of ``N`` environments (``[N]`` leading dim on every array).

    Attributes:
      reward: float32 reward of the step.
      terminated: bool, the episode reached a terminal state.
      truncated: bool, the episode hit the time limit without a terminal state
        (``truncated and not terminated``, as ``GymVectorEnv`` reports it).
      final_obs: ``[N, *obs]`` the observation a truncated episode ended on (zeros
        where not ``truncated``).
      episode_done: bool, ``terminated or truncated``: an episode finished.
      episode_return, episode_length: float32 / int32 return and length of the
        episode that finished (zeros where not ``episode_done``).
    """

    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: PyTree
    episode_done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


def check_spaces(what: str, observation_space: Any, action_space: Any) -> None:
    """Raise ``ValueError`` naming ``what`` (``gymnax:CartPole-v1``) unless the spaces
    are what device actors take: a Gymnasium ``Box`` observation space and a
    ``Discrete`` or ``Box`` action space."""
    if not isinstance(action_space, (gymnasium.spaces.Discrete, gymnasium.spaces.Box)):
        raise ValueError(f"{what}: unsupported action space {action_space!r} "
                         "(device actors take a gymnasium Discrete or Box)")
    if not isinstance(observation_space, gymnasium.spaces.Box):
        raise ValueError(f"{what}: unsupported observation space {observation_space!r} "
                         "(device actors take a gymnasium Box)")


def _where(mask: jax.Array, new: PyTree, old: PyTree) -> PyTree:
    """``new`` in the rows where ``mask`` (``[N]`` bool), else ``old``; every leaf ``[N, ...]``."""
    return jax.tree.map(
        lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b), new, old)


class AutoResetEnv:
    """``N`` copies of one pure environment, batched, auto-reset and time-limited.

    Args:
      reset_fn: ``reset_fn(key) -> (obs, state)`` for ONE environment: ``key`` a PRNG
        key, ``obs`` an array of ``observation_space.shape``, ``state`` any pytree of
        arrays. Pure and jittable.
      step_fn: ``step_fn(key, state, action) -> (obs, state, reward, terminated)`` for
        ONE environment, without auto-reset and without a time limit: ``action`` of
        ``action_space`` (an int32 ``[]`` for ``Discrete``, float32 ``[act]`` for
        ``Box``), ``reward`` a ``[]`` float, ``terminated`` a ``[]`` bool (a terminal
        state: no bootstrap). Pure and jittable.
      observation_space, action_space: one environment's Gymnasium spaces
        (:func:`check_spaces`); observations are cast to ``observation_space.dtype``.
      max_episode_steps: the time limit in steps (an episode reaching it without
        terminating is ``truncated``), or ``None`` for none.
      clip_actions: ``Box`` actions are clipped to the space's bounds before the
        environment steps (the learner still sees the sampled action), as
        ``GymVectorEnv`` does.
      what: names the environment in errors (``brax:halfcheetah``).

    Raises:
      ValueError: unsupported spaces, or ``max_episode_steps`` not a positive int
        (nor ``None``).
    """

    def __init__(self, reset_fn: Callable, step_fn: Callable, observation_space: Any,
                 action_space: Any, max_episode_steps: int | None, clip_actions: bool = True,
                 what: str = "environment"):
        check_spaces(what, observation_space, action_space)
        if max_episode_steps is not None and (
                isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int)
                or max_episode_steps < 1):
            raise ValueError(f"{what}: max_episode_steps={max_episode_steps!r} must be a "
                             "positive integer or None")
        self.observation_space, self.action_space = observation_space, action_space
        self.max_episode_steps = max_episode_steps
        self._reset_fn, self._step_fn = reset_fn, step_fn
        self._clip = clip_actions and isinstance(action_space, gymnasium.spaces.Box)
        self._obs_dtype = np.dtype(observation_space.dtype)

    def _reset_all(self, key: jax.Array, n: int) -> tuple[jax.Array, PyTree]:
        obs, state = jax.vmap(self._reset_fn)(jax.random.split(key, n))
        return jnp.asarray(obs).astype(self._obs_dtype), state

    def reset(self, key: jax.Array, num_envs: int) -> EnvCarry:
        """``num_envs`` fresh episodes (key: a PRNG key; split over the envs)."""
        obs, state = self._reset_all(key, num_envs)
        return EnvCarry(state, obs, jnp.zeros(num_envs, jnp.float32),
                        jnp.zeros(num_envs, jnp.int32))

    def step(self, carry: EnvCarry, action: jax.Array, key: jax.Array) -> tuple[EnvCarry, StepOut]:
        """Step every environment with ``action`` (``[N, *act]``); finished episodes are
        reset (the carry holds their first observation). ``key`` is split into the
        environments' step keys (one each) and the reset keys.

        Returns:
          ``(carry, out)``: the next carry and the step's :class:`StepOut`.
        """
        n = carry.episode_return.shape[0]
        if self._clip:
            action = jnp.clip(action, self.action_space.low, self.action_space.high)
        k_step, k_reset = jax.random.split(key)
        obs, state, reward, terminated = jax.vmap(self._step_fn)(
            jax.random.split(k_step, n), carry.state, action)
        obs = jnp.asarray(obs).astype(self._obs_dtype)
        reward = jnp.asarray(reward).astype(jnp.float32).reshape(n)
        terminated = jnp.asarray(terminated).astype(bool).reshape(n)
        ep_return, ep_length = carry.episode_return + reward, carry.episode_length + 1
        if self.max_episode_steps is None:
            truncated = jnp.zeros_like(terminated)
        else:
            truncated = jnp.logical_and(ep_length >= self.max_episode_steps, ~terminated)
        done = jnp.logical_or(terminated, truncated)

        def restart(state_obs):
            fresh_obs, fresh_state = self._reset_all(k_reset, n)
            return _where(done, (fresh_state, fresh_obs), state_obs)

        next_state, next_obs = jax.lax.cond(done.any(), restart, lambda x: x, (state, obs))
        out = StepOut(reward, terminated, truncated, _where(truncated, obs, jnp.zeros_like(obs)),
                      done, jnp.where(done, ep_return, 0.0), jnp.where(done, ep_length, 0))
        carry = EnvCarry(next_state, next_obs, jnp.where(done, 0.0, ep_return),
                         jnp.where(done, 0, ep_length))
        return carry, out
