"""Rung 1b, physics only: the env's own MuJoCo model stepped with random controls, no
observations, vision, rewards or resets timed: the floor under rung 1's env step.

* ``hide_and_seek`` / ``hide_and_seek_full``: the hide-and-seek bench's own
  measurement, :func:`jaxsrl.envs.hide_and_seek.bench.physics_steps_per_second`
  (``n_substeps`` ``mj_step`` per env step on the env's own scenes, a new layout every
  episode). Only ``variant`` is taken from ``env_kwargs``; other overrides are listed
  under ``ignored_env_kwargs``.
* Gymnasium MuJoCo environments (``env.unwrapped`` is a
  ``gymnasium.envs.mujoco.MujocoEnv``, e.g. ``HalfCheetah-v5``): ``frame_skip``
  ``mj_step`` per env step on ``env.unwrapped.model``, controls uniform in the
  actuators' ``ctrlrange``, the state reset (untimed) every ``max_episode_steps``.
* Anything else (CartPole, Atari, ...): not applicable (``{"not_applicable": why}``).

The clock is this thread's CPU time (``time.thread_time``), so the rate is env steps
per core-second whatever else the machine runs; one thread, one core. Rung 1 reports
its own env steps per core-second the same way (``env_steps_per_core_s``), and the
report gives rung 1 as a fraction of this rung.
"""

from __future__ import annotations

import time

import numpy as np

#: env steps of the first, short calibration run (its rate sizes the measured run).
CALIBRATION_STEPS = 20


def _hide_and_seek(env: str, env_kwargs: dict, duration_s: float, seed: int) -> dict:
    from jaxsrl.envs import MULTI_AGENT_ENVS
    from jaxsrl.envs.hide_and_seek.bench import physics_steps_per_second
    from jaxsrl.envs.hide_and_seek.config import make_config

    kwargs = {**MULTI_AGENT_ENVS[env][1], **env_kwargs}
    variant = kwargs.pop("variant")
    rate = physics_steps_per_second(variant, CALIBRATION_STEPS, seed, clock=time.thread_time)
    steps = max(CALIBRATION_STEPS, int(rate * duration_s))
    rate = physics_steps_per_second(variant, steps, seed, clock=time.thread_time)
    return {"physics_steps_per_core_s": rate, "steps": steps, "variant": variant,
            "substeps_per_env_step": make_config(variant).n_substeps,
            "source": "jaxsrl.envs.hide_and_seek.bench.physics_steps_per_second",
            "ignored_env_kwargs": sorted(kwargs)}


def mujoco_steps_per_core_s(model, data, frame_skip: int, steps: int, horizon: int,
                            rng: np.random.Generator, reset) -> float:
    """Env steps (``frame_skip`` ``mj_step`` each) per CPU-second of this thread, controls
    uniform in ``model.actuator_ctrlrange`` (``[-1, 1]`` for unlimited actuators);
    ``reset()`` (untimed) every ``horizon`` steps."""
    import mujoco

    limited = np.asarray(model.actuator_ctrllimited, bool)
    rng_lo = np.where(limited, model.actuator_ctrlrange[:, 0], -1.0)
    rng_hi = np.where(limited, model.actuator_ctrlrange[:, 1], 1.0)
    elapsed, done = 0.0, 0
    while done < steps:
        n = min(horizon, steps - done)
        ctrl = rng.uniform(rng_lo, rng_hi, size=(n, model.nu))
        t0 = time.thread_time()
        for k in range(n):
            data.ctrl[:] = ctrl[k]
            mujoco.mj_step(model, data, nstep=frame_skip)
        elapsed += time.thread_time() - t0
        done += n
        reset()
    return steps / max(elapsed, 1e-9)


def _gymnasium_mujoco(env_id: str, env_kwargs: dict, duration_s: float, seed: int) -> dict | None:
    import gymnasium

    try:
        from gymnasium.envs.mujoco import MujocoEnv
    except ImportError:  # no mujoco bindings: not a MuJoCo env here
        return None
    env = gymnasium.make(env_id, **env_kwargs)
    try:
        base = env.unwrapped
        if not isinstance(base, MujocoEnv):
            return None
        env.reset(seed=seed)
        horizon = int(env.spec.max_episode_steps or 1000) if env.spec else 1000
        rng = np.random.default_rng(seed)
        reset = lambda: env.reset()  # noqa: E731
        args = (base.model, base.data, int(base.frame_skip))
        rate = mujoco_steps_per_core_s(*args, CALIBRATION_STEPS, horizon, rng, reset)
        steps = max(CALIBRATION_STEPS, int(rate * duration_s))
        rate = mujoco_steps_per_core_s(*args, steps, horizon, rng, reset)
        return {"physics_steps_per_core_s": rate, "steps": steps,
                "substeps_per_env_step": int(base.frame_skip),
                "source": "env.unwrapped.model stepped by mujoco.mj_step (jaxsrl.bench.physics)"}
    finally:
        env.close()


def measure(env: str, env_kwargs: dict | None, duration_s: float, seed: int = 0) -> dict:
    """Physics-only env steps per core-second of ``env`` (module docstring), measured for
    about ``duration_s`` CPU-seconds, or ``{"not_applicable": reason}``.

    Raises:
      ValueError: (from the env) bad ``env_kwargs``.
    """
    from jaxsrl.envs import MULTI_AGENT_ENVS, atari, gym_id, multi_agent_factory

    kwargs = dict(env_kwargs or {})
    if env in MULTI_AGENT_ENVS:
        return _hide_and_seek(env, kwargs, duration_s, seed)
    if multi_agent_factory(env) is not None:
        return {"not_applicable": f"{env} is a user multi-agent env: no known MuJoCo model"}
    if atari.is_atari(env):
        return {"not_applicable": f"{env} is an Atari game: no physics model"}
    out = _gymnasium_mujoco(gym_id(env), kwargs, duration_s, seed)
    if out is None:
        return {"not_applicable": f"{env} is not a MuJoCo env (env.unwrapped has no MuJoCo model)"}
    return out
