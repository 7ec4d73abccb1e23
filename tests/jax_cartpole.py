"""A user's own JAX-native environment, as ``--env=jax:jax_cartpole:make`` loads it
(``jaxsrl.envs.jax_native.user_env``): the classic cart-pole of Barto, Sutton and
Anderson (1983), with the constants, Euler integration, termination bounds, reward and
reset range of Gymnasium's ``CartPole-v1`` (``gymnasium/envs/classic_control/cartpole.py``;
gymnax's ``CartPole-v1`` uses the same), in pure JAX. No gymnax: the device-actor
tests run on it where the extras are not installed.

The state is the observation: ``[4]`` float32 ``(x, x_dot, theta, theta_dot)`` (metres,
m/s, radians, rad/s). Action ``0`` pushes the cart left, ``1`` right (10 N). Reward 1.0
every step, the terminating one included. Terminated when ``|x| > 2.4`` or
``|theta| > 12 degrees``; the time limit (``max_episode_steps``, Gymnasium's 500) is
jaxsrl's to count.
"""

from __future__ import annotations

import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TOTAL_MASS = MASS_CART + MASS_POLE
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4


class CartPole:
    """One cart-pole as pure functions (the ``jax:`` protocol of
    ``jaxsrl.envs.jax_native.user_env``)."""

    def __init__(self, max_episode_steps: int | None = 500):
        high = np.array([X_LIMIT * 2, np.inf, THETA_LIMIT * 2, np.inf], np.float32)
        self.observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.max_episode_steps = max_episode_steps

    def reset(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Each state variable uniform in ``[-0.05, 0.05)``; ``(obs, state)``, both ``[4]``."""
        state = jax.random.uniform(key, (4,), jnp.float32, -0.05, 0.05)
        return state, state

    def step(self, key: jax.Array, state: jax.Array, action: jax.Array) -> tuple:  # noqa: ARG002
        """``(obs, state, reward, terminated)`` after one Euler step of ``TAU`` seconds."""
        x, x_dot, theta, theta_dot = state
        force = jnp.where(action == 1, FORCE, -FORCE)
        cos, sin = jnp.cos(theta), jnp.sin(theta)
        temp = (force + POLE_MASS_LENGTH * theta_dot ** 2 * sin) / TOTAL_MASS
        theta_acc = (GRAVITY * sin - cos * temp) / (
            HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos ** 2 / TOTAL_MASS))
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
        state = jnp.stack([x + TAU * x_dot, x_dot + TAU * x_acc,
                           theta + TAU * theta_dot, theta_dot + TAU * theta_acc])
        terminated = (jnp.abs(state[0]) > X_LIMIT) | (jnp.abs(state[2]) > THETA_LIMIT)
        return state, state, jnp.float32(1.0), terminated


def make(max_episode_steps: int | None = 500) -> CartPole:
    """The factory ``--env=jax:jax_cartpole:make`` names (``--env_kwargs.max_episode_steps``)."""
    return CartPole(max_episode_steps)
