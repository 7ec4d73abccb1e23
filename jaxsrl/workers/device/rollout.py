"""A device rollout: ``T`` steps of ``N`` JAX-native environments and the agent's own
``act`` (the pure function the inference server runs) under one ``lax.scan``, giving the
:class:`~jaxsrl.core.agent.Trajectory` the CPU actors' segments give the learner
(``jaxsrl.streams.segment.to_trajectory``): ``[N, T + 1]`` observations, terminated kept
apart from truncated, the final observation of truncated episodes, the behaviour
log-probabilities and policy versions. ``valid`` is ``None`` (every step valid).

Recurrent agents (``initial_carry`` given): the agent's carry travels through the scan
beside the environments' (:class:`RecurrentCarry`), is reset to ``initial_carry`` in
every row whose episode ended (terminated or truncated) after that step, as the CPU
actors zero it (``jaxsrl.workers.actor.worker``), and ``Trajectory.carry`` is each
segment's first-step carry (``[N, ...]`` leaves), as CPU segments record it."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsrl.core.agent import Trajectory
from jaxsrl.streams.spaces import action_leaf


class RecurrentCarry(NamedTuple):
    """What a recurrent agent's rollout carries from one segment to the next.

    Attributes:
      env: the environments' carry (``env.reset``'s, ``[N, ...]`` leaves).
      agent: the agent's carry (``initial_carry(N)``'s pytree, ``[N, ...]`` leaves).
    """

    env: Any
    agent: Any


def initial_rollout_carry(env: Any, key: jax.Array, n: int,
                          initial_carry: Callable | None = None) -> Any:
    """The carry a rollout starts from: ``env.reset(key, n)``, or for a recurrent agent
    (``initial_carry`` given and not returning ``None``) a :class:`RecurrentCarry` of it
    and ``initial_carry(n)``."""
    env_carry = env.reset(key, n)
    agent = None if initial_carry is None else initial_carry(n)
    return env_carry if agent is None else RecurrentCarry(env_carry, agent)


class EpisodeStats(NamedTuple):
    """Episodes that finished during a rollout, step by step: row ``n``'s episode ended
    after step ``t`` where ``done[n, t]``. Every field is ``[N, T]``; stacked results
    put their own axes in front (a population's ``[M, N, T]``, chunks of steps
    ``[K, N, T]``). :func:`finished_episodes` turns a fetched one into the episodes.

    Attributes:
      done: bool, an episode ended after that step (terminated or truncated).
      episode_return: float32 return of the episode that ended there (0 elsewhere).
      episode_length: int32 length in env steps of that episode (0 elsewhere).
    """

    done: Any
    episode_return: Any
    episode_length: Any

    @property
    def count(self) -> Any:
        """Episodes finished (int, summed over the last two axes: ``[...]``)."""
        return self.done.sum(axis=(-2, -1))

    @property
    def return_sum(self) -> Any:
        """Sum of their returns (float32, ``[...]``)."""
        return self.episode_return.sum(axis=(-2, -1))

    @property
    def length_sum(self) -> Any:
        """Sum of their lengths in env steps (int, ``[...]``)."""
        return self.episode_length.sum(axis=(-2, -1))


def finished_episodes(stats: EpisodeStats) -> tuple[np.ndarray, np.ndarray]:
    """The episodes of a fetched :class:`EpisodeStats` in the order they finished: by
    leading axis (chunks in order), then step, then environment row within a step.

    Args:
      stats: fields ``[..., N, T]`` (NumPy or fetched JAX arrays; one member's slice of
        a population's ``[M, N, T]``, e.g. ``EpisodeStats(*(x[i] for x in stats))``).

    Returns:
      ``(returns, lengths)``: ``[E]`` float32 returns and ``[E]`` int32 lengths (env
      steps) of the ``E = count`` finished episodes, for
      :meth:`jaxsrl.experiment.metrics.MetricsAccumulator.add_episodes`.

    Raises:
      ValueError: fields of fewer than 2 axes or of different shapes.
    """
    done, ret, length = (np.asarray(x) for x in stats)
    if done.ndim < 2 or not done.shape == ret.shape == length.shape:
        raise ValueError(f"finished_episodes: fields {done.shape}, {ret.shape}, "
                         f"{length.shape} must be one [..., N, T] shape")
    step_major = lambda x: np.swapaxes(x, -1, -2).reshape(-1)  # noqa: E731  [..., T, N]
    keep = step_major(done).astype(bool)
    return (step_major(ret)[keep].astype(np.float32),
            step_major(length)[keep].astype(np.int32))


def make_rollout(env: Any, act: Callable, segment_length: int,
                 initial_carry: Callable | None = None) -> Callable:
    """``rollout(params, env_carry, rng, version) -> (env_carry, trajectory, stats)``.

    Args:
      env: a batched pure environment (``reset(key, n)``, ``step(carry, action, key)``,
        ``action_space``; :class:`~jaxsrl.envs.jax_native.gymnax_env.GymnaxEnv`).
      act: the agent's ``act(params, obs, carry, rng) -> (action, carry, extras)``
        (``extras["logp"]`` ``[N]`` float32).
      segment_length: ``T``, steps per segment.
      initial_carry: the agent's ``initial_carry(n)``; ``None`` (or one returning
        ``None``): a feed-forward agent, ``act`` gets ``carry=None`` and the rollout's
        ``env_carry`` is the environments' own. Otherwise ``env_carry`` is a
        :class:`RecurrentCarry` (:func:`initial_rollout_carry`) and the trajectory's
        ``carry`` the agent's carry at each segment's first step.

    The returned function is pure and jittable: ``version`` is the ``[]`` int32 policy
    version of ``params`` (every step's ``policy_version``); ``trajectory`` has ``B = N``
    segments of ``T`` steps; ``stats`` the :class:`EpisodeStats` of the episodes that
    ended in it. Keys: ``rng`` is split into one key per step, each into the action's
    and the environments' keys.

    Raises:
      ValueError: ``segment_length`` < 1.
    """
    if segment_length < 1:
        raise ValueError(f"segment_length={segment_length} must be positive")
    action_dtype = jnp.dtype(action_leaf(env.action_space)[0])
    recurrent = initial_carry is not None and initial_carry(1) is not None

    def rollout(params, env_carry, rng, version):
        def step(carries, key):
            carry, agent_carry = carries
            k_act, k_env = jax.random.split(key)
            obs = carry.obs
            action, agent_carry, extras = act(params, obs, agent_carry, k_act)
            carry, out = env.step(carry, action, k_env)
            if recurrent:  # a new episode starts from the initial carry
                agent_carry = reset_carry(agent_carry, out.terminated | out.truncated,
                                          initial_carry)
            else:  # feed-forward: whatever act hands back is not carried
                agent_carry = None
            return (carry, agent_carry), (obs, action.astype(action_dtype), extras["logp"], out)

        keys = jax.random.split(rng, segment_length)
        first_agent_carry = env_carry.agent if recurrent else None
        start = (env_carry.env, first_agent_carry) if recurrent else (env_carry, None)
        (env_carry, agent_carry), (obs, action, logp, out) = jax.lax.scan(step, start, keys)
        bt = lambda x: jnp.swapaxes(x, 0, 1)  # [T, N, ...] -> [N, T, ...]
        n = env_carry.episode_return.shape[0]
        traj = Trajectory(
            obs=bt(jnp.concatenate([obs, env_carry.obs[None]], axis=0)),  # [N, T + 1, *obs]
            action=bt(action),
            reward=bt(out.reward),
            terminated=bt(out.terminated),
            truncated=bt(out.truncated),
            final_obs=bt(out.final_obs),
            behaviour_logp=bt(logp.astype(jnp.float32)),
            policy_version=jnp.full((n, segment_length), version, jnp.int32),
            carry=first_agent_carry,
        )
        stats = EpisodeStats(bt(out.episode_done), bt(out.episode_return.astype(jnp.float32)),
                             bt(out.episode_length.astype(jnp.int32)))
        if recurrent:
            env_carry = RecurrentCarry(env_carry, agent_carry)
        return env_carry, traj, stats

    return rollout


def reset_carry(agent_carry: Any, done: jax.Array, initial_carry: Callable) -> Any:
    """``agent_carry`` with the rows where ``done`` (``[N]`` bool) replaced by
    ``initial_carry(N)``'s (every leaf ``[N, ...]``)."""
    init = initial_carry(done.shape[0])
    pick = lambda new, old: jnp.where(done.reshape(done.shape + (1,) * (old.ndim - 1)), new, old)
    return jax.tree.map(pick, init, agent_carry)
