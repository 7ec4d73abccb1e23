"""JAX-native envs that misbehave, for the device-actor run contract
(``tests/system/test_device_run_contract.py``), loaded as ``--env=jax:tests.jax_hostile_envs:<make>``:
``make_nan`` gives NaN rewards now and then, ``make_slow`` makes every compiled step
slow (a host callback that sleeps), so a signal arrives while a call runs. Both are
:mod:`tests.jax_cartpole`'s cart-pole otherwise.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from tests.jax_cartpole import CartPole


class NanRewardCartPole(CartPole):
    """Cart-pole whose reward is NaN with probability ``nan_prob`` at each step (drawn
    from the step's key)."""

    def __init__(self, nan_prob: float, max_episode_steps: int | None = 500):
        super().__init__(max_episode_steps)
        self.nan_prob = nan_prob

    def step(self, key, state, action):
        obs, state, reward, terminated = super().step(key, state, action)
        nan = jax.random.uniform(key) < self.nan_prob
        return obs, state, jnp.where(nan, jnp.float32(jnp.nan), reward), terminated


def _sleep(seconds: float):
    def host(x):
        time.sleep(seconds)
        return np.asarray(x)
    return host


class SlowCartPole(CartPole):
    """Cart-pole whose every step waits ``sleep_s`` seconds on the host (a
    ``pure_callback`` per env step), so one compiled rollout of ``N x T`` steps lasts
    about ``N * T * sleep_s`` seconds."""

    def __init__(self, sleep_s: float, max_episode_steps: int | None = 500):
        super().__init__(max_episode_steps)
        self.sleep_s = sleep_s

    def step(self, key, state, action):
        state = jax.pure_callback(_sleep(self.sleep_s), jax.ShapeDtypeStruct((4,), jnp.float32),
                                  state, vmap_method="sequential")
        return super().step(key, state, action)


def make_nan(nan_prob: float = 0.01, max_episode_steps: int | None = 500) -> NanRewardCartPole:
    return NanRewardCartPole(nan_prob, max_episode_steps)


def make_slow(sleep_s: float = 0.002, max_episode_steps: int | None = 500) -> SlowCartPole:
    return SlowCartPole(sleep_s, max_episode_steps)
