"""JaxMARL's MPE environments as device actors step them: each of an environment's
``A`` agents is one row of the batch (one shared policy, parameter sharing), so ``N``
rows are ``N / A`` environments; the device rollout and the fused step are the
single-agent ones. Same interface as
:class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv` (its :class:`EnvCarry` and
:class:`StepOut`): auto-reset, ``truncated`` at the time limit, the final observation of
truncated episodes, per-episode return and length of every agent (an episode of an
``A``-agent environment counts ``A`` times, one return per agent, as a CPU run's
per-agent episode returns do).

JaxMARL (``pip install 'jaxsrl[jaxmarl]'``) is imported when an adapter is built. Only
MPE ids (``MPE_simple_spread_v3``, ...) are taken: their episodes end only at the time
limit ``max_steps``, so every end is ``truncated`` and none ``terminated``; other
JaxMARL envs report one ``done`` for both, which the adapter cannot split. The
environment's own ``step_env`` is stepped (not JaxMARL's auto-resetting ``step``, which
drops the final observation), and the time limit is counted in the carry (JaxMARL's MPE
``done`` comes one step after ``max_steps``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.envs.jax_native.autoreset import EnvCarry, StepOut


def _import_jaxmarl():
    try:
        import jaxmarl  # noqa: PLC0415  (optional dependency, imported when used)
        from jaxmarl.environments import spaces as marl_spaces  # noqa: PLC0415
    except ImportError as exc:
        raise ValueError(f"--env=jaxmarl:... needs jaxmarl: pip install 'jaxsrl[jaxmarl]' "
                         f"({exc})") from None
    return jaxmarl, marl_spaces


def _gym_space(space: Any, marl_spaces: Any, what: str) -> gymnasium.Space:
    if isinstance(space, marl_spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n))
    if isinstance(space, marl_spaces.Box):
        return gymnasium.spaces.Box(np.broadcast_to(np.asarray(space.low, np.float32), space.shape),
                                    np.broadcast_to(np.asarray(space.high, np.float32), space.shape),
                                    tuple(space.shape), np.float32)
    raise ValueError(f"{what}: unsupported space {space!r} (device actors take Discrete or Box)")


class JaxMarlEnv:
    """``N`` rows: the ``A`` agents of ``N / A`` copies of JaxMARL MPE environment ``name``.

    Args:
      name: a JaxMARL MPE id (``MPE_simple_spread_v3``).
      env_kwargs: keywords of the environment's constructor (``max_steps``,
        ``num_agents``, ...).
      clip_actions: continuous actions are clipped to the space's bounds before the
        environment steps.

    Attributes:
      observation_space, action_space: one agent's Gymnasium spaces (all agents'
        are the same).
      num_agents: ``A``, rows per environment.
      max_steps: the time limit in steps.

    Raises:
      ValueError: jaxmarl is missing, ``name`` is not a JaxMARL MPE id, a keyword its
        constructor does not take, or agents whose spaces differ (no shared policy).
    """

    def __init__(self, name: str, env_kwargs: dict | None = None, clip_actions: bool = True):
        jaxmarl, marl_spaces = _import_jaxmarl()
        mpe = sorted(e for e in jaxmarl.registered_envs if e.startswith("MPE_"))
        if name not in mpe:
            raise ValueError(f"jaxmarl:{name}: device actors take JaxMARL's MPE ids only "
                             f"({', '.join(mpe)})")
        try:
            self.env = jaxmarl.make(name, **(env_kwargs or {}))
        except TypeError as exc:
            raise ValueError(f"--env_kwargs {sorted(env_kwargs or {})} of jaxmarl:{name}: "
                             f"{exc}") from None
        self.name, self.agents = name, list(self.env.agents)
        self.num_agents, self.max_steps = len(self.agents), int(self.env.max_steps)
        obs = [_gym_space(self.env.observation_space(a), marl_spaces, f"jaxmarl:{name}")
               for a in self.agents]
        act = [_gym_space(self.env.action_space(a), marl_spaces, f"jaxmarl:{name}")
               for a in self.agents]
        if any(o != obs[0] for o in obs) or any(a != act[0] for a in act):
            raise ValueError(f"jaxmarl:{name}: its agents' spaces differ; device actors run "
                             "one shared policy over agents with the same spaces")
        self.observation_space, self.action_space = obs[0], act[0]
        self._clip = clip_actions and isinstance(self.action_space, gymnasium.spaces.Box)

    def _envs(self, rows: int) -> int:
        if rows % self.num_agents:
            raise ValueError(f"{rows} rows (batch_segments) of jaxmarl:{self.name} are not a "
                             f"multiple of its {self.num_agents} agents")
        return rows // self.num_agents

    def _rows(self, obs: dict) -> jax.Array:
        """``{agent: [E, *obs]}`` -> ``[E * A, *obs]`` float32 (env-major)."""
        stacked = jnp.stack([obs[a] for a in self.agents], axis=1)
        return stacked.reshape((-1,) + stacked.shape[2:]).astype(jnp.float32)

    def reset(self, key: jax.Array, num_envs: int) -> EnvCarry:
        """``num_envs`` rows (a multiple of ``A``) of fresh episodes."""
        e = self._envs(num_envs)
        obs, state = jax.vmap(self.env.reset)(jax.random.split(key, e))
        return EnvCarry(state, self._rows(obs), jnp.zeros(num_envs, jnp.float32),
                        jnp.zeros(num_envs, jnp.int32))

    def step(self, carry: EnvCarry, action: jax.Array, key: jax.Array) -> tuple[EnvCarry, StepOut]:
        """Step every environment with the rows' ``action`` (``[E * A, *act]``);
        environments at the time limit are reset (sampled only on such a step).

        Returns:
          ``(carry, out)``: the next carry and the step's
          :class:`~jaxsrl.envs.jax_native.autoreset.StepOut` (``[E * A]`` rows).
        """
        rows = carry.episode_return.shape[0]
        e, a = self._envs(rows), self.num_agents
        if self._clip:
            action = jnp.clip(action, self.action_space.low, self.action_space.high)
        per_env = action.reshape((e, a) + action.shape[1:])
        actions = {agent: per_env[:, i] for i, agent in enumerate(self.agents)}
        k_step, k_reset = jax.random.split(key)
        obs, state, reward, _, _ = jax.vmap(self.env.step_env)(
            jax.random.split(k_step, e), carry.state, actions)
        obs = self._rows(obs)
        reward = jnp.stack([reward[agent] for agent in self.agents], axis=1).reshape(rows)
        reward = reward.astype(jnp.float32)
        ep_return, ep_length = carry.episode_return + reward, carry.episode_length + 1
        truncated = ep_length >= self.max_steps  # MPE: every episode end is the time limit
        terminated = jnp.zeros_like(truncated)
        env_done = truncated.reshape(e, a)[:, 0]

        def restart(args):
            state, obs = args
            fresh_obs, fresh = jax.vmap(self.env.reset)(jax.random.split(k_reset, e))
            pick = lambda new, old: jnp.where(
                env_done.reshape((e,) + (1,) * (new.ndim - 1)), new, old)
            return jax.tree.map(pick, fresh, state), jnp.where(truncated[:, None],
                                                               self._rows(fresh_obs), obs)

        next_state, next_obs = jax.lax.cond(env_done.any(), restart, lambda x: x, (state, obs))
        out = StepOut(reward, terminated, truncated, jnp.where(truncated[:, None], obs, 0.0),
                      truncated, jnp.where(truncated, ep_return, 0.0),
                      jnp.where(truncated, ep_length, 0))
        carry = EnvCarry(next_state, next_obs, jnp.where(truncated, 0.0, ep_return),
                         jnp.where(truncated, 0, ep_length))
        return carry, out
