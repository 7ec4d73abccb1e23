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
count it (``episodes_discarded``). An environment with a flat ``Dict`` observation space
that also has ``step_rows(actions [R, ...], rows [n], obs {key: [R, ...]}, reward [R])
-> None | infos [n]`` (as ``HideAndSeekEnv`` does; ``rows``: the rows of its current
``agents`` in order) is stepped through it: it writes its agents' rows of the group's
arrays in place and returns its infos only when its episode ends (by truncation), so no
per-agent dicts either side. At a step where no episode ends, ``StepResult.final_obs`` is
one dict of zeros shared by every such step, read-only (writing to it raises ValueError).
Imports no JAX.
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
        # boolean observation columns the game declares (jaxsrl.streams.obs_pack), or None
        self.wire_bits = getattr(env0, "wire_bits", None)
        self.row_agent = [a for _ in range(num_envs) for a in self.agents]
        self.row_team = [getattr(env0, "team_of", lambda _: "")(a) for a in self.row_agent]
        self._seed = seed
        leaves = space_leaves(self.observation_space)
        self._obs = {k: np.zeros((self.num_rows,) + shape, dtype) for k, (dtype, shape) in leaves.items()}
        self._returns = np.zeros(self.num_rows, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        self._rows: list = [None] * num_envs  # rows of each env's present agents (int64 index array)
        names = {k: f"obs/{k}" for k in getattr(self.observation_space, "spaces", {})}  # a Dict's keys
        flat = names and set(names.values()) == set(leaves)  # a flat Dict
        self._by_rows = [flat and callable(getattr(env, "step_rows", None)) for env in self.envs]
        self._row_obs = {k: self._obs[n] for k, n in names.items()} if flat else {}  # env keys -> group arrays
        self._valid = np.zeros(self.num_rows, bool)  # rows of the agents of each env's current episode
        # the final observations of a step at which no episode ends: all zeros, shared by
        # every such step and read-only, so no caller can change what later steps return
        self._no_final = {k: np.zeros(v.shape, v.dtype) for k, v in self._obs.items()}
        for v in self._no_final.values():
            v.flags.writeable = False

    def _present_rows(self, e: int, env: Any) -> np.ndarray:
        """Rows of ``env.agents`` (in that order), int64; also marks them in ``_valid``."""
        A = len(self.agents)
        rows = np.array([e * A + self.agents.index(a) for a in env.agents], np.int64)
        self._valid[e * A:(e + 1) * A] = False
        self._valid[rows] = True
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
        valid = self._valid.copy()  # the row's agent acts in this step
        discarded = np.zeros(self.num_rows, bool)  # the row's episode ended for discard here
        final = None
        episodes = []
        ended = []  # (env, its last infos) of the envs stepped by rows whose episode ended
        for e, env in enumerate(self.envs):
            if self._by_rows[e]:
                infos = env.step_rows(action, self._rows[e], self._row_obs, reward)
                if infos is not None:
                    ended.append((e, infos))
                continue
            present = set(env.agents)  # variable team sizes: absent agents' rows idle
            acts = {agent: action[e * A + a] for a, agent in enumerate(self.agents) if agent in present}
            obs, rew, term, trunc, infos = env.step(acts)
            for a, agent in enumerate(self.agents):
                if agent in present:
                    reward[e * A + a] = rew[agent]
                    terminated[e * A + a] = term[agent]
                    truncated[e * A + a] = trunc[agent] and not term[agent]
            self._returns[e * A:(e + 1) * A] += reward[e * A:(e + 1) * A]
            self._lengths[e] += 1
            if any(term.values()) or any(trunc.values()):
                if final is None:
                    final = {k: np.zeros(v.shape, v.dtype) for k, v in self._obs.items()}
                self._write(e, obs, final)
                took_part = [(e * A + a, agent) for a, agent in enumerate(self.agents) if agent in present]
                obs = self._end_episode(e, env, [row for row, _ in took_part],
                                        [infos.get(agent, {}) for _, agent in took_part],
                                        any(term.values()), terminated, truncated, valid, discarded,
                                        episodes)
            self._write(e, obs, self._obs)
        if all(self._by_rows):  # the dict path above counts its own envs
            self._returns += reward
            self._lengths += 1
        elif any(self._by_rows):
            by_rows = np.asarray(self._by_rows, bool)
            self._returns[np.repeat(by_rows, A)] += reward[np.repeat(by_rows, A)]
            self._lengths[by_rows] += 1
        for e, infos in ended:  # every row of the group is written: the ended episodes' last observations
            if final is None:
                final = {k: np.zeros(v.shape, v.dtype) for k, v in self._obs.items()}
            rows = self._rows[e]
            for k, v in self._obs.items():
                final[k][rows] = v[rows]
            obs = self._end_episode(e, self.envs[e], rows.tolist(), infos, False, terminated, truncated, valid,
                                    discarded, episodes)
            self._write(e, obs, self._obs)
        if final is None:  # no episode ended: the shared read-only zeros
            final = self._no_final
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

    def close(self) -> None:
        for env in self.envs:
            env.close()
