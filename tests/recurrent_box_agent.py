"""A small recurrent agent for flat ``Box`` observations, for tests of recurrent agents
on device actors against the CPU path (the built-in recurrent PPO, ``ppo.network=
entity_lstm``, needs hide-and-seek's entity observations).

It is feed-forward PPO (``agents.ppo``, the same ``PPOConfig`` and flags ``--ppo_prev.*``)
whose policy sees ``concat(obs, carry)`` ``[N, 2 * D]``, where the carry ``[N, D]``
float32 is a decaying trace of the episode's observations so far,
``carry' = DECAY * carry + obs`` (zeros at its first step: the initial carry).
``learn`` rebuilds every step's carry from ``Trajectory.carry`` (the segment's
first-step carry) and the observations, zeroing it after every step that ended an
episode, exactly as the actors must reset it; a wrong first carry or reset changes
what ``learn`` sees. Select it with ``--agent=recurrent_box_agent:AGENT``
(``tests/`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from agents import ppo
from agents.ppo_config import PPOConfig
from jaxsrl.core.agent import Agent, AgentFns, EnvSpec, Trajectory

HYPERPARAMETERS = ppo.HYPERPARAMETERS
DECAY = 0.5


def make(config: PPOConfig, spec: EnvSpec, num_updates: int) -> AgentFns:
    """The agent's pure functions (module docstring).

    Raises:
      ValueError: the observation space is not a 1-D ``Box``.
    """
    space = spec.observation_space
    if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"recurrent_box_agent needs a 1-D Box observation space; got {space}")
    D = space.shape[0]
    wide = gymnasium.spaces.Box(-np.inf, np.inf, (2 * D,), np.float32)
    inner = ppo.AGENT.make(config, EnvSpec(wide, spec.action_space), num_updates)

    def initial_carry(n: int):
        return jnp.zeros((n, D), jnp.float32)

    def act(params, obs, carry, rng, *, deterministic: bool = False):
        action, _, extras = inner.act(params, jnp.concatenate([obs, carry], -1), None, rng,
                                      deterministic=deterministic)
        return action, DECAY * carry + obs.astype(jnp.float32), extras

    def learn(state, traj: Trajectory, rng):
        T = traj.reward.shape[1]
        tm = lambda x: jnp.swapaxes(x, 0, 1)  # [B, T, ...] <-> [T, B, ...]
        done = tm(traj.terminated | traj.truncated)[..., None]  # [T, B, 1]

        def step(c, x):  # the carry after step t, before and after the reset
            o, d = x
            nxt = DECAY * c + o.astype(jnp.float32)
            return jnp.where(d, 0.0, nxt), (nxt, jnp.where(d, 0.0, nxt))

        _, (unreset, after) = jax.lax.scan(step, traj.carry, (tm(traj.obs[:, :T]), done))
        carry = jnp.concatenate([traj.carry[:, None], tm(after)], axis=1)  # [B, T + 1, D]
        obs = jnp.concatenate([traj.obs, carry], -1)
        # A truncated episode's bootstrap: the carry it had after step t, before the reset.
        final_obs = jnp.concatenate([traj.final_obs, tm(unreset)], -1)
        return inner.learn(state, traj._replace(obs=obs, final_obs=final_obs, carry=None), rng)

    return AgentFns(init=inner.init, act=act, learn=learn, initial_carry=initial_carry)


AGENT = Agent("ppo_prev", PPOConfig, make)
