"""gymnax environments as device actors step them: pure batched ``reset``/``step``
with auto-reset, ``terminated`` kept apart from ``truncated``, the final observation of
truncated episodes and per-episode return and length, as the CPU actors report them
(:class:`jaxsrl.envs.gym_vector.GymVectorEnv`).

gymnax (``pip install 'jaxsrl[gymnax]'``) is imported when an adapter is built, never
at import time of :mod:`jaxsrl.envs`. Its ``Environment.step`` (gymnax 1.0.1) already
auto-resets and reports ``terminated``, ``truncated`` (the time limit
``params.max_steps_in_episode``) and ``info["final_observation"]`` (the observation the
episode ended on, before the reset); this adapter vmaps it over ``N`` environments and
keeps the episode counters. :class:`EnvCarry` and :class:`StepOut` are every adapter's
(:mod:`jaxsrl.envs.jax_native.autoreset`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import types

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.envs.jax_native.autoreset import EnvCarry, StepOut, check_spaces


#: Modules gymnax imports at its own import for drawing only (``gymnax.environments.misc.pong``
#: ``import seaborn``, which pulls ``scipy.stats``; several envs ``import matplotlib.pyplot``):
#: seconds of a run's start under load. They stand in ``sys.modules`` as :class:`_Deferred`
#: modules that import the real one at their first attribute use, so a run that never
#: draws never pays for them.
DRAWING_ONLY = ("seaborn", "matplotlib.pyplot")


class _Deferred(types.ModuleType):
    """A module imported at its first attribute use: the real one then replaces this
    stand-in in ``sys.modules``, and the stand-in forwards every attribute to it."""

    def __getattr__(self, attr: str):
        real = sys.modules.get(self.__name__)
        if real is None or real is self:
            sys.modules.pop(self.__name__, None)
            try:
                real = importlib.import_module(self.__name__)
            except BaseException:
                sys.modules.setdefault(self.__name__, self)
                raise
        return getattr(real, attr)


def _defer(name: str) -> None:
    """Stand a :class:`_Deferred` ``name`` in ``sys.modules`` unless it is imported
    already or not installed."""
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return
    sys.modules[name] = _Deferred(name)


def _import_gymnax():
    if "gymnax" not in sys.modules:
        for name in DRAWING_ONLY:
            _defer(name)
    try:
        import gymnax  # noqa: PLC0415  (optional dependency, imported when used)
        from gymnax.environments import spaces as gymnax_spaces  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"--env=gymnax:... needs gymnax: pip install 'jaxsrl[gymnax]' "
                         f"({exc})") from None
    return gymnax, gymnax_spaces


class GymnaxEnv:
    """``N`` copies of gymnax environment ``name``, as pure functions.

    Args:
      name: a gymnax id (``CartPole-v1``; ``gymnax.registered_envs`` lists them).
      env_kwargs: fields of the environment's ``EnvParams`` to change
        (``{"max_steps_in_episode": 200}``).
      clip_actions: ``Box`` actions are clipped to the space's bounds before the
        environment steps (the learner still sees the sampled action), as
        ``GymVectorEnv`` does.

    Attributes:
      observation_space, action_space: per-env Gymnasium spaces (gymnax's own
        ``gymnax_space_to_gym_space``).

    Raises:
      ValueError: gymnax is missing, ``name`` is not a gymnax id, an ``env_kwargs``
        key is not a field of its ``EnvParams``, or an unsupported action space.
    """

    def __init__(self, name: str, env_kwargs: dict | None = None, clip_actions: bool = True):
        gymnax, gymnax_spaces = _import_gymnax()
        if name not in gymnax.registered_envs:
            raise ValueError(f"unknown gymnax environment {name!r}; gymnax ids: "
                             f"{', '.join(sorted(gymnax.registered_envs))}")
        self.name = name
        self.env, params = gymnax.make(name)
        fields = {f.name for f in dataclasses.fields(params)}
        unknown = sorted(set(env_kwargs or {}) - fields)
        if unknown:
            raise ValueError(f"--env_kwargs {unknown} of gymnax:{name}: not fields of its "
                             f"EnvParams ({', '.join(sorted(fields))})")
        self.params = params.replace(**(env_kwargs or {}))
        self.observation_space = gymnax_spaces.gymnax_space_to_gym_space(
            self.env.observation_space(self.params))
        self.action_space = gymnax_spaces.gymnax_space_to_gym_space(
            self.env.action_space(self.params))
        check_spaces(f"gymnax:{name}", self.observation_space, self.action_space)
        self._clip = clip_actions and isinstance(self.action_space, gymnasium.spaces.Box)
        self._obs_dtype = np.dtype(self.observation_space.dtype)

    def _cast(self, obs: jax.Array) -> jax.Array:
        return obs.astype(self._obs_dtype)

    def reset(self, key: jax.Array, num_envs: int) -> EnvCarry:
        """``num_envs`` fresh episodes (key: a PRNG key; split over the envs)."""
        obs, state = jax.vmap(self.env.reset, in_axes=(0, None))(
            jax.random.split(key, num_envs), self.params)
        return EnvCarry(state, self._cast(obs), jnp.zeros(num_envs, jnp.float32),
                        jnp.zeros(num_envs, jnp.int32))

    def step(self, carry: EnvCarry, action: jax.Array, key: jax.Array) -> tuple[EnvCarry, StepOut]:
        """Step every environment with ``action`` (``[N, *act]``); finished episodes are
        reset (the carry holds their first observation).

        Returns:
          ``(carry, out)``: the next carry and the step's :class:`StepOut`.
        """
        n = carry.episode_return.shape[0]
        if self._clip:
            action = jnp.clip(action, self.action_space.low, self.action_space.high)
        obs, state, reward, terminated, truncated, info = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(key, n), carry.state, action, self.params)
        reward = reward.astype(jnp.float32)
        terminated = terminated.astype(bool)
        truncated = jnp.logical_and(truncated.astype(bool), ~terminated)
        done = jnp.logical_or(terminated, truncated)
        ep_return = carry.episode_return + reward
        ep_length = carry.episode_length + 1

        def where(mask, x):
            return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, jnp.zeros_like(x))

        out = StepOut(reward, terminated, truncated,
                      where(truncated, self._cast(info["final_observation"])),
                      done, jnp.where(done, ep_return, 0.0), jnp.where(done, ep_length, 0))
        carry = EnvCarry(state, self._cast(obs), jnp.where(done, 0.0, ep_return),
                         jnp.where(done, 0, ep_length))
        return carry, out
