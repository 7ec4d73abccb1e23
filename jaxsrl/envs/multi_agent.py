"""A group of PettingZoo-style parallel environments as the actor worker steps them.

Rows are environment-major: row ``e * A + a`` is agent ``a`` of environment ``e``
(``A = len(possible_agents)`` rows per environment, each agent with the same
observation and action space so one policy can serve any of them). An agent absent
from an episode (variable team sizes) has an idle row: zero observations and reward,
and ``StepResult.valid`` False for each of its steps, so learners can mask it out
(``Trajectory.valid``). The environment comes from a factory (or a module exposing
``make_env(**kwargs)``) returning a ``pettingzoo.ParallelEnv``, optionally with
``team_of(agent) -> str``; episode statistics found in ``info["episode_stats"]`` at the
end of an episode are reported with each agent's episode. An episode whose last infos
carry a true ``"discard_episode"`` (hide-and-seek's physics failed twice: its guard.py) is
not reported: its last step is not valid and its rows are flagged in
``StepResult.discarded``, so the actor can mask the episode's steps it still holds and
count it (``episodes_discarded``). An environment that also has
``step_arrays(actions [n, ...]) -> (obs {key: [n, ...]}, rewards [n], terminated [n],
truncated [n], infos [n])`` over its current ``agents`` in order (as ``HideAndSeekEnv``
does) is stepped through it: no per-agent dicts either side. Imports no JAX.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from jaxsrl.envs.gym_vector import StepResult
from jaxsrl.streams.spaces import flatten_obs, space_leaves


class MultiAgentVectorEnv:
    """``num_envs`` copies of a parallel multi-agent environment.

    Args:
      module: ``factory(**kwargs) -> ParallelEnv``, or the name of a module exposing
        ``make_env(**kwargs)``.
      kwargs: keyword arguments for the factory.
      num_envs: environments in this group.
      seed: env ``i`` is seeded ``seed + i`` at its first reset.

    Attributes:
      num_envs, num_rows: environments, and rows (``num_envs * agents_per_env``).
      row_agent, row_team: agent name and team of each row.
    """

    def __init__(self, module: str | Callable[..., Any], kwargs: dict, num_envs: int, seed: int):
        make_env = importlib.import_module(module).make_env if isinstance(module, str) else module
        self.envs = [make_env(**kwargs) for _ in range(num_envs)]
        env0 = self.envs[0]
        self.agents = list(env0.possible_agents)
        self.num_envs, self.num_rows = num_envs, num_envs * len(self.agents)
        self.observation_space = env0.observation_space(self.agents[0])
        self.action_space = env0.action_space(self.agents[0])
        self.row_agent = [a for _ in range(num_envs) for a in self.agents]
        self.row_team = [getattr(env0, "team_of", lambda _: "")(a) for a in self.row_agent]
        self._seed = seed
        leaves = space_leaves(self.observation_space)
        self._obs = {k: np.zeros((self.num_rows,) + shape, dtype) for k, (dtype, shape) in leaves.items()}
        self._returns = np.zeros(self.num_rows, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._arrays = [callable(getattr(env, "step_arrays", None)) for env in self.envs]
        self._rows: list = [None] * num_envs  # rows of each env's present agents (slice or index array)
        names = {k: f"obs/{k}" for k in getattr(self.observation_space, "spaces", {})}  # a Dict's keys
        self._flat_names = names if names and set(names.values()) == set(leaves) else None  # flat Dict only

    def _present_rows(self, e: int, env: Any):
        """Rows of ``env.agents`` (in that order): a slice when they are consecutive."""
        A = len(self.agents)
        rows = np.array([e * A + self.agents.index(a) for a in env.agents], np.intp)
        if len(rows) and np.array_equal(rows, rows[0] + np.arange(len(rows))):
            return slice(int(rows[0]), int(rows[0]) + len(rows))
        return rows

    def _write(self, e: int, obs: dict, out: dict) -> None:
        """Write env ``e``'s observations; rows of agents absent this episode get zeros."""
        A = len(self.agents)
        for a, agent in enumerate(self.agents):
            if agent in obs:
                for k, v in flatten_obs(obs[agent]).items():
                    out[k][e * A + a] = v
            else:
                for v in out.values():
                    v[e * A + a] = 0

    def reset(self) -> dict:
        """Reset every environment; returns name -> ``[rows, ...]`` observations."""
        for e, env in enumerate(self.envs):
            obs, _ = env.reset(seed=self._seed + e)
            self._write(e, obs, self._obs)
            self._rows[e] = self._present_rows(e, env)
        self._returns[:] = 0
        self._lengths[:] = 0
        return {k: v.copy() for k, v in self._obs.items()}

    def step(self, action: np.ndarray) -> StepResult:
        """Step every environment with ``action`` (``[rows, ...]``); auto-resets ended ones."""
        A = len(self.agents)
        reward = np.zeros(self.num_rows, np.float32)
        terminated = np.zeros(self.num_rows, bool)
        truncated = np.zeros(self.num_rows, bool)
        valid = np.zeros(self.num_rows, bool)  # the row's agent acts in this step
        discarded = np.zeros(self.num_rows, bool)  # the row's episode ended for discard here
        final = None
        episodes = []
        for e, env in enumerate(self.envs):
            if self._arrays[e]:
                final = self._step_arrays(e, env, action, reward, terminated, truncated, valid, discarded,
                                          final, episodes)
                continue
            present = set(env.agents)  # variable team sizes: absent agents' rows idle
            acts = {agent: action[e * A + a] for a, agent in enumerate(self.agents) if agent in present}
            obs, rew, term, trunc, infos = env.step(acts)
            for a, agent in enumerate(self.agents):
                if agent in present:
                    valid[e * A + a] = True
                    reward[e * A + a] = rew[agent]
                    terminated[e * A + a] = term[agent]
                    truncated[e * A + a] = trunc[agent] and not term[agent]
            self._returns[e * A:(e + 1) * A] += reward[e * A:(e + 1) * A]
            self._lengths[e] += 1
            if any(term.values()) or any(trunc.values()):
                if final is None:
                    final = {k: np.zeros_like(v) for k, v in self._obs.items()}
                self._write(e, obs, final)
                took_part = [(e * A + a, agent) for a, agent in enumerate(self.agents) if agent in present]
                obs = self._end_episode(e, env, [row for row, _ in took_part],
                                        [infos.get(agent, {}) for _, agent in took_part],
                                        any(term.values()), terminated, truncated, valid, discarded,
                                        episodes)
            self._write(e, obs, self._obs)
        if final is None:
            final = {k: np.zeros_like(v) for k, v in self._obs.items()}
        return StepResult({k: v.copy() for k, v in self._obs.items()}, reward, terminated,
                          truncated, final, episodes, valid,
                          discarded if np.count_nonzero(discarded) else None)

    def _end_episode(self, e: int, env: Any, rows: list, infos: list, ended_by_term: bool,
                     terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray,
                     discarded: np.ndarray, episodes: list) -> dict:
        """Report the episode of env ``e`` (``rows``: the rows of the agents that took part,
        ``infos``: their last infos), mark all its rows ended, reset it; returns the new
        episode's observations. Every agent's episode ends together (the game has no
        per-agent end). An episode any of whose last infos says ``discard_episode`` is not
        reported: its rows' step is marked not ``valid`` and ``discarded``."""
        A = len(self.agents)
        if any(info.get("discard_episode") for info in infos):
            valid[rows] = False
            discarded[rows] = True
        else:
            for row, info in zip(rows, infos):
                stats = info.get("episode_stats", {})
                episodes.append({"return": float(self._returns[row]), "length": int(self._lengths[e]),
                                 "team": self.row_team[row], **{k: float(v) for k, v in stats.items()}})
        terminated[e * A:(e + 1) * A] = ended_by_term
        truncated[e * A:(e + 1) * A] = not ended_by_term
        self._returns[e * A:(e + 1) * A] = 0
        self._lengths[e] = 0
        obs, _ = env.reset()
        self._rows[e] = self._present_rows(e, env)
        return obs

    def _flatten(self, obs: dict) -> dict:
        """``flatten_obs`` of a batch, with the names computed once for a flat ``Dict`` space."""
        names = self._flat_names
        return flatten_obs(obs) if names is None else {names[k]: v for k, v in obs.items()}

    def _step_arrays(self, e, env, action, reward, terminated, truncated, valid, discarded, final,
                     episodes):
        """``step`` of env ``e`` through its ``step_arrays``; returns ``final`` (created
        when this env's episode ends)."""
        A = len(self.agents)
        rows = self._rows[e]
        obs, rew, term, trunc, infos = env.step_arrays(action[rows])
        valid[rows] = True
        reward[rows] = rew
        terminated[rows] = term
        truncated[rows] = trunc & ~term
        self._returns[e * A:(e + 1) * A] += reward[e * A:(e + 1) * A]
        self._lengths[e] += 1
        flat = self._flatten(obs)
        if not (np.count_nonzero(term) or np.count_nonzero(trunc)):
            for k, v in flat.items():
                self._obs[k][rows] = v
            return final
        if final is None:
            final = {k: np.zeros_like(v) for k, v in self._obs.items()}
        for k, v in flat.items():
            final[k][rows] = v
        obs = self._end_episode(e, env, np.arange(self.num_rows)[rows].tolist(), infos, bool(term.any()),
                                terminated, truncated, valid, discarded, episodes)
        self._write(e, obs, self._obs)
        return final

    def close(self) -> None:
        for env in self.envs:
            env.close()
