"""Rung 11, device actors: env steps/s of the compiled rollout loop
(:func:`jaxsrl.workers.device.rollout.make_rollout`: ``N`` JAX-native environments
``vmap``ped and ``lax.scan``ned over ``T`` steps with PPO's own ``act``), by batch size,
on this process's first JAX device. No learning, no host copies except the
``block_until_ready`` that ends each timed call.

The default environment is ``gymnax:CartPole-v1``; without gymnax the rung answers
``{"skipped": "..."}`` (the extra to install) instead of failing.
"""

from __future__ import annotations

import time

#: Environments per batch (``N``) measured by default, each for ``SEGMENT_LENGTH`` steps.
BATCHES = (16, 64, 256)
SEGMENT_LENGTH = 32
DEFAULT_ENV = "gymnax:CartPole-v1"


def measure(env_id: str = DEFAULT_ENV, batches=BATCHES, segment_length: int = SEGMENT_LENGTH,
            duration_s: float = 2.0, seed: int = 0, env_kwargs: dict | None = None) -> dict:
    """Env steps/s of the compiled rollout of ``env_id`` for each ``N`` in ``batches``.

    Args:
      env_id: a JAX-native id (``gymnax:CartPole-v1``, ``brax:halfcheetah``).
      batches: environments per call, each a point.
      segment_length: ``T``, steps per call.
      duration_s: measured seconds per point (after the compile and one warm-up call).
      seed: parameters' and environments' seed.

    Returns:
      ``{"env", "segment_length", "device", "points": [{"num_envs", "compile_s",
      "calls", "seconds", "env_steps_per_s"}]}``, or ``{"skipped": why}`` when the
      environment's library is not installed.

    Raises:
      ValueError: an unknown environment or a non-positive batch.
    """
    from jaxsrl.envs.jax_native import registry

    try:
        env = registry.make(env_id, env_kwargs)
    except ValueError as exc:
        if "pip install" in str(exc):  # the library (an optional extra) is missing
            return {"skipped": f"device actors rung skipped: {exc}"}
        raise
    import jax

    from agents import get_agent
    from jaxsrl.core.agent import EnvSpec
    from jaxsrl.workers.device.rollout import make_rollout

    bad = [n for n in batches if n < 1]
    if bad:
        raise ValueError(f"batches {bad}: every batch must be a positive number of envs")
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(env.observation_space, env.action_space), 10)
    params = fns.init(jax.random.PRNGKey(seed)).params
    rollout = jax.jit(make_rollout(env, fns.act, segment_length), donate_argnums=(1,))
    dev = jax.devices()[0]
    points = []
    for n in batches:
        carry = env.reset(jax.random.PRNGKey(seed + 1), n)
        t0 = time.perf_counter()
        step = rollout.lower(params, carry, jax.random.PRNGKey(0), 0).compile()
        compile_s = time.perf_counter() - t0
        key = jax.random.PRNGKey(seed + 2)
        carry = jax.tree.map(jax.numpy.copy, carry)  # own buffers: the carry is donated
        carry, traj, _ = step(params, carry, key, 0)  # warm-up
        jax.block_until_ready(traj)
        calls, t0 = 0, time.perf_counter()
        while True:
            key, sub = jax.random.split(key)
            carry, traj, _ = step(params, carry, sub, 0)
            calls += 1
            jax.block_until_ready(traj)
            seconds = time.perf_counter() - t0
            if seconds >= duration_s:
                break
        points.append({"num_envs": n, "compile_s": round(compile_s, 2), "calls": calls,
                       "seconds": round(seconds, 3),
                       "env_steps_per_s": n * segment_length * calls / seconds})
    return {"env": env_id, "segment_length": segment_length,
            "device": f"{dev.platform}: {dev.device_kind}", "points": points}
