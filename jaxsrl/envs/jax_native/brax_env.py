"""Brax environments as device actors step them: pure batched ``reset``/``step`` with
auto-reset, a time limit reported as ``truncated`` (kept apart from ``terminated``), the
final observation of truncated episodes and per-episode return and length, as the CPU
actors report them (:class:`jaxsrl.envs.gym_vector.GymVectorEnv`). Same interface as
:class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv` (its :class:`EnvCarry` and
:class:`StepOut`).

Brax (``pip install 'jaxsrl[brax]'``) is imported when an adapter is built, never at
import time of :mod:`jaxsrl.envs`. Brax's own training wrappers (``EpisodeWrapper``,
``AutoResetWrapper``) are not used: they fold the time limit into ``done`` and reset
every finished environment to one cached first state. Here a raw Brax env's ``done`` is
``terminated``, the time limit is counted in the carry, and a finished environment
starts a freshly sampled episode (its own ``reset`` key).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.envs.jax_native.gymnax_env import EnvCarry, StepOut

#: The physics pipeline when ``env_kwargs`` names none (``docs/device_actors.md``
#: compares them): the cheapest to compile on a CPU.
DEFAULT_BACKEND = "positional"
BACKENDS = ("generalized", "positional", "spring", "mjx")
#: Steps per episode when ``env_kwargs`` names none (Gymnasium's MuJoCo v5 limit).
DEFAULT_EPISODE_LENGTH = 1000


def _import_brax():
    try:
        from brax import envs as brax_envs  # noqa: PLC0415  (optional dependency)
    except ImportError as exc:
        raise ValueError(f"--env=brax:... needs brax: pip install 'jaxsrl[brax]' ({exc})") from None
    return brax_envs


class BraxEnv:
    """``N`` copies of Brax environment ``name``, as pure functions.

    Args:
      name: a Brax environment name (``halfcheetah``, ``ant``, ``hopper``, ...;
        ``brax.envs._envs`` lists them).
      env_kwargs: ``backend`` (one of :data:`BACKENDS`, default
        :data:`DEFAULT_BACKEND`), ``episode_length`` (steps before ``truncated``,
        default :data:`DEFAULT_EPISODE_LENGTH`); every other key goes to the Brax
        environment's constructor (``ctrl_cost_weight``, ``n_frames``, ...).
      clip_actions: actions are clipped to the actuators' control range before the
        environment steps (the learner still sees the sampled action), as
        ``GymVectorEnv`` does.

    Attributes:
      observation_space: ``Box(-inf, inf, (obs_size,), float32)``.
      action_space: ``Box(low, high, (action_size,), float32)``, the actuators'
        control range.
      episode_length: int, the time limit in steps.

    Raises:
      ValueError: brax is missing, ``name`` is not a Brax environment, an unknown
        backend, a non-positive ``episode_length``, or a keyword its constructor
        does not take.
    """

    def __init__(self, name: str, env_kwargs: dict | None = None, clip_actions: bool = True):
        brax_envs = _import_brax()
        kwargs = dict(env_kwargs or {})
        backend = kwargs.pop("backend", DEFAULT_BACKEND)
        self.episode_length = kwargs.pop("episode_length", DEFAULT_EPISODE_LENGTH)
        names = sorted(brax_envs._envs)  # noqa: SLF001  (brax's registry has no public list)
        if name not in names:
            raise ValueError(f"unknown brax environment {name!r}; brax names: {', '.join(names)}")
        if backend not in BACKENDS:
            raise ValueError(f"--env_kwargs.backend={backend!r} of brax:{name}: not one of "
                             f"{', '.join(BACKENDS)}")
        if not isinstance(self.episode_length, int) or self.episode_length < 1:
            raise ValueError(f"--env_kwargs.episode_length={self.episode_length!r} of "
                             f"brax:{name} must be a positive integer")
        try:
            self.env = brax_envs.get_environment(name, backend=backend, **kwargs)
        except TypeError as exc:
            raise ValueError(f"--env_kwargs {sorted(kwargs)} of brax:{name}: {exc}") from None
        self.name, self.backend = name, backend
        obs_size, act_size = int(self.env.observation_size), int(self.env.action_size)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_size,), np.float32)
        low, high = np.full(act_size, -1.0, np.float32), np.full(act_size, 1.0, np.float32)
        ctrl = getattr(getattr(getattr(self.env, "sys", None), "actuator", None), "ctrl_range", None)
        if ctrl is not None and np.shape(ctrl) == (act_size, 2):
            low, high = np.asarray(ctrl, np.float32)[:, 0], np.asarray(ctrl, np.float32)[:, 1]
        self.action_space = gymnasium.spaces.Box(low, high, (act_size,), np.float32)
        self._clip = clip_actions

    def reset(self, key: jax.Array, num_envs: int) -> EnvCarry:
        """``num_envs`` fresh episodes (key: a PRNG key; split over the envs)."""
        state = jax.vmap(self.env.reset)(jax.random.split(key, num_envs))
        return EnvCarry(state, state.obs.astype(jnp.float32), jnp.zeros(num_envs, jnp.float32),
                        jnp.zeros(num_envs, jnp.int32))

    def step(self, carry: EnvCarry, action: jax.Array, key: jax.Array) -> tuple[EnvCarry, StepOut]:
        """Step every environment with ``action`` (``[N, act]`` float32); finished
        episodes are reset (the carry holds their first observation). New episodes are
        sampled only on a step where some environment finished (``lax.cond``).

        Returns:
          ``(carry, out)``: the next carry and the step's
          :class:`~jaxsrl.envs.jax_native.gymnax_env.StepOut`.
        """
        n = carry.episode_return.shape[0]
        if self._clip:
            action = jnp.clip(action, self.action_space.low, self.action_space.high)
        state = jax.vmap(self.env.step)(carry.state, action.astype(jnp.float32))
        obs = state.obs.astype(jnp.float32)
        reward = state.reward.astype(jnp.float32)
        terminated = state.done > 0.5
        ep_return = carry.episode_return + reward
        ep_length = carry.episode_length + 1
        truncated = jnp.logical_and(ep_length >= self.episode_length, ~terminated)
        done = jnp.logical_or(terminated, truncated)

        def where(mask, new, old):
            return jax.tree.map(
                lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b),
                new, old)

        def restart(state):
            fresh = jax.vmap(self.env.reset)(jax.random.split(key, n))
            return where(done, fresh, state)

        next_state = jax.lax.cond(done.any(), restart, lambda s: s, state)
        out = StepOut(reward, terminated, truncated,
                      jnp.where(truncated[:, None], obs, 0.0),
                      done, jnp.where(done, ep_return, 0.0), jnp.where(done, ep_length, 0))
        carry = EnvCarry(next_state, next_state.obs.astype(jnp.float32),
                         jnp.where(done, 0.0, ep_return), jnp.where(done, 0, ep_length))
        return carry, out
