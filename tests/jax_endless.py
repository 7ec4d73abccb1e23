"""A JAX-native environment whose episodes never end (``--env=jax:tests.jax_endless:make``,
or ``jax:jax_endless:make`` with ``tests`` on the path): no terminal state and no time
limit (``max_episode_steps=None``), so only the evaluation's own step bound
(``jaxsrl.workers.device.evaluate``) ends an evaluation of it.

The state is the observation: ``[2]`` float32, a point that action ``0`` moves by
``-0.01`` and action ``1`` by ``+0.01`` along both axes, wrapped into ``[-1, 1)``.
Reward ``1.0`` every step. Never terminated.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np


class Endless:
    """One endless environment as pure functions (the ``jax:`` protocol of
    ``jaxsrl.envs.jax_native.user_env``)."""

    max_episode_steps = None  # no time limit

    def __init__(self):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """A uniform point in ``[-1, 1)^2``; ``(obs, state)``, both ``[2]`` float32."""
        state = jax.random.uniform(key, (2,), jnp.float32, -1.0, 1.0)
        return state, state

    def step(self, key: jax.Array, state: jax.Array, action: jax.Array) -> tuple:  # noqa: ARG002
        """``(obs, state, reward 1.0, terminated False)``."""
        state = jnp.mod(state + jnp.where(action == 1, 0.01, -0.01) + 1.0, 2.0) - 1.0
        return state, state, jnp.float32(1.0), jnp.bool_(False)


def make() -> Endless:
    """The factory ``--env=jax:tests.jax_endless:make`` names."""
    return Endless()
