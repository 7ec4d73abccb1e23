"""Brax environments as device actors step them: pure batched ``reset``/``step`` with
auto-reset, a time limit reported as ``truncated`` (kept apart from ``terminated``), the
final observation of truncated episodes and per-episode return and length, as the CPU
actors report them (:class:`jaxsrl.envs.gym_vector.GymVectorEnv`): a raw Brax env's
single-env ``reset``/``step`` batched by :class:`~jaxsrl.envs.jax_native.autoreset.AutoResetEnv`
(``reset(key, n)``, ``step(carry, action, key)``, as
:class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv`).

Brax (``pip install 'jaxsrl[brax]'``) is imported when an adapter is built, never at
import time of :mod:`jaxsrl.envs`. Brax's own training wrappers (``EpisodeWrapper``,
``AutoResetWrapper``) are not used: they fold the time limit into ``done`` and reset
every finished environment to one cached first state. Here a raw Brax env's ``done`` is
``terminated``, the time limit (``episode_length``) is counted in the carry, and a
finished environment starts a freshly sampled episode (its own ``reset`` key).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.envs.jax_native.autoreset import AutoResetEnv

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
      reset, step: the batched ``reset(key, n)`` and ``step(carry, action, key)`` of
        :class:`~jaxsrl.envs.jax_native.autoreset.AutoResetEnv`.

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
        self._batched = AutoResetEnv(self._reset_one, self._step_one, self.observation_space,
                                     self.action_space, self.episode_length, clip_actions,
                                     f"brax:{name}")
        self.reset, self.step = self._batched.reset, self._batched.step

    def _reset_one(self, key: jax.Array) -> tuple[jax.Array, Any]:
        state = self.env.reset(key)
        return state.obs, state

    def _step_one(self, key: jax.Array, state: Any, action: jax.Array) -> tuple:  # noqa: ARG002
        state = self.env.step(state, action.astype(jnp.float32))  # Brax steps are deterministic
        return state.obs, state, state.reward, state.done > 0.5
