"""A group of Gymnasium environments as the actor worker steps them.

The actor sees every environment family through the same small interface
(:class:`ActorEnv`): a batch of *rows* (one row = one agent in one environment; for
single-agent Gymnasium envs a row is an env), flat named observation arrays, and a
list of finished episodes per step. This module imports no JAX.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import gymnasium
import numpy as np

from jaxsrl.envs.spaces import flatten_obs


class StepResult(NamedTuple):
    """What one vectorised step returns to the actor.

    Attributes:
      obs: name -> ``[rows, ...]`` observations after the step (first observation of
        the next episode where an episode ended).
      reward: ``[rows]`` float32.
      terminated: ``[rows]`` bool.
      truncated: ``[rows]`` bool.
      final_obs: name -> ``[rows, ...]`` last observation of each truncated episode
        (zeros elsewhere), for bootstrapping.
      episodes: one dict per finished episode: ``{"return": float, "length": int}``
        plus optional extra statistics (``"team"``, ``"stats/..."``).
      valid: ``[rows]`` bool, the row's agent took part in this step (False: an idle
        row of an agent absent from the episode), or ``None`` for groups whose rows are
        never idle (single-agent groups; see ``has_idle_rows``).
    """

    obs: dict
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: dict
    episodes: list
    valid: np.ndarray | None = None


class GymVectorEnv:
    """``num_envs`` copies of one Gymnasium environment, stepped synchronously.

    Uses ``gymnasium.make_vec(..., vectorization_mode="sync")`` with the SAME_STEP
    autoreset mode, so an ended episode's final observation arrives with the step
    that ended it (``info["final_obs"]``) and the returned observation already
    belongs to the next episode.

    Args:
      env_id: a registered Gymnasium id, e.g. ``"CartPole-v1"``.
      num_envs: environments in this group.
      seed: base seed; env ``i`` is seeded ``seed + i`` at the first reset.
      env_kwargs: extra keyword arguments for ``gymnasium.make``.
      env_fn: builds one (wrapped) environment instead of ``gymnasium.make(env_id,
        **env_kwargs)`` (e.g. Atari with its preprocessing, ``jaxsrl/envs/atari.py``).
      episodes_from_info: report finished episodes only from the final step's
        ``info["raw_episode"] = {"r": return, "l": length}`` (gymnasium's
        ``RecordEpisodeStatistics(stats_key="raw_episode")`` placed below any reward
        clipping or episodic-life wrapper), not from the summed rewards of each
        ``terminated``/``truncated`` row: the reported return is then the raw score of
        the whole game even when training sees clipped rewards and per-life episodes.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, env_kwargs: dict | None = None,
                 env_fn: Callable[[], gymnasium.Env] | None = None,
                 episodes_from_info: bool = False):
        same_step = gymnasium.vector.AutoresetMode.SAME_STEP
        if env_fn is not None:
            self.env = gymnasium.vector.SyncVectorEnv([env_fn] * num_envs, autoreset_mode=same_step)
        else:
            self.env = gymnasium.make_vec(
                env_id, num_envs=num_envs, vectorization_mode="sync",
                vector_kwargs={"autoreset_mode": same_step}, **(env_kwargs or {}))
        self._episodes_from_info = episodes_from_info
        self.num_rows = num_envs
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self._seed = seed
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        if isinstance(self.action_space, gymnasium.spaces.Box):
            self._low, self._high = self.action_space.low, self.action_space.high
        else:
            self._low = None

    def reset(self) -> dict:
        """Reset every environment; returns name -> ``[rows, ...]`` observations."""
        obs, _ = self.env.reset(seed=self._seed)
        self._returns[:] = 0
        self._lengths[:] = 0
        return flatten_obs(obs)

    def step(self, action: np.ndarray) -> StepResult:
        """Step every environment with ``action`` (``[rows, ...]``, the wire dtype).

        ``Box`` actions are clipped to the space's bounds here (the policy's Gaussian
        is unbounded; the learner sees the unclipped action).
        """
        if self._low is not None:
            action = np.clip(action, self._low, self._high)
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward = np.asarray(reward, np.float32)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool) & ~terminated
        flat = flatten_obs(obs)
        final = {k: np.zeros_like(v) for k, v in flat.items()}
        done = terminated | truncated
        self._returns += reward
        self._lengths += 1
        episodes = []
        if done.any():
            raw = info.get("final_info", {}).get("raw_episode") if self._episodes_from_info else None
            for i in np.flatnonzero(done):
                if not self._episodes_from_info:
                    episodes.append({"return": float(self._returns[i]), "length": int(self._lengths[i])})
                elif raw is not None and raw["_r"][i]:  # a whole game ended (not one life)
                    episodes.append({"return": float(raw["r"][i]), "length": int(raw["l"][i])})
                if truncated[i]:
                    for k, v in flatten_obs(info["final_obs"][i]).items():
                        final[k][i] = v
            self._returns[done] = 0
            self._lengths[done] = 0
        return StepResult(flat, reward, terminated, truncated, final, episodes)

    def close(self) -> None:
        self.env.close()


def single_spaces(env_id: str, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of one environment of ``env_id``."""
    env = gymnasium.make(env_id, **(env_kwargs or {}))
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
