"""MultiAgentVectorEnv (jaxsrl/envs/multi_agent.py) and episodes marked
``info["discard_episode"]`` (hide-and-seek's physics failed twice): such an episode is
not reported, its last step is not valid and its rows are flagged ``discarded``; other
environments' episodes of the same step are reported as usual. Both step paths: per-agent
dicts and ``step_rows`` (hide-and-seek's), and the real game with a guard that always
fails."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import make_env as make_hide_and_seek
from jaxsrl.envs.multi_agent import MultiAgentVectorEnv

AGENTS = ["a_0", "a_1"]


class Game:
    """Two agents, reward 1 a step, episodes of 2 steps (truncated); the episode of
    index ``discard`` ends marked ``discard_episode`` (as hide-and-seek's: no stats)."""

    possible_agents = AGENTS

    def __init__(self, discard: int):
        self.agents, self.ep, self.count, self.discard = [], -1, 0, discard

    def observation_space(self, agent):
        return gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.ep, self.count, self.agents = self.ep + 1, 0, list(AGENTS)
        return {a: np.array([self.ep], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def _end(self):
        self.count += 1
        end, bad = self.count == 2, self.count == 2 and self.ep == self.discard
        info = {"discard_episode": bad} | ({} if bad or not end else {"episode_stats": {"stat": 7.0}})
        return end, info

    def step(self, actions):
        end, info = self._end()
        obs = {a: np.array([self.ep], np.float32) for a in self.agents}
        return (obs, {a: 1.0 for a in self.agents}, {a: False for a in self.agents},
                {a: end for a in self.agents}, {a: dict(info) for a in self.agents})

    def close(self):
        pass


class RowGame(Game):
    """The same game through ``step_rows`` (the path hide-and-seek takes; a flat ``Dict``
    observation space, as that path needs)."""

    def observation_space(self, agent):
        return gymnasium.spaces.Dict({"ep": gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)})

    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        return {a: {"ep": o} for a, o in obs.items()}, infos

    def step_rows(self, actions, rows, obs, reward):
        end, info = self._end()
        obs["ep"][rows] = self.ep
        reward[rows] = 1.0
        return [dict(info) for _ in rows] if end else None


@pytest.mark.parametrize("game", [Game, RowGame])
def test_a_discarded_episode_is_not_reported_and_its_last_step_not_valid(game):
    # env 0 discards its second episode (index 1), env 1 none
    env = MultiAgentVectorEnv(lambda discard: game(discard), {"discard": 1}, 2, seed=0)
    env.envs[1].discard = -1
    env.reset()
    results = [env.step(np.zeros(4, np.int64)) for _ in range(4)]
    for k in (0, 2):  # mid-episode: nothing ends, nothing discarded
        assert results[k].episodes == [] and results[k].discarded is None and results[k].valid.all()
    first, second = results[1], results[3]
    assert first.discarded is None and first.valid.all() and len(first.episodes) == 4
    assert first.episodes[0] == {"return": 2.0, "length": 2, "team": "", "stat": 7.0}
    # step 4: env 0's episode 1 ends for discard, env 1's ends as usual
    np.testing.assert_array_equal(second.discarded, [True, True, False, False])
    np.testing.assert_array_equal(second.valid, [False, False, True, True])
    assert second.truncated.all()  # every row's episode still ends (auto-reset)
    assert len(second.episodes) == 2  # env 1's two agents only
    assert all(e["return"] == 2.0 and e["stat"] == 7.0 for e in second.episodes)
    third = env.step(np.zeros(4, np.int64))
    key = "obs/ep" if game is RowGame else "obs"
    assert third.obs[key][0, 0] == 2.0  # env 0 was reset: its episode 2
    assert third.discarded is None and third.valid.all()


def test_hide_and_seek_physics_failure_is_discarded_by_the_vector_env():
    """The real game with a guard that takes any motion for a failure: the first step
    ends every episode for discard; none is reported, no row is valid."""
    env = MultiAgentVectorEnv(make_hide_and_seek, {"variant": "quadrant", "n_hiders": (1, 1),
                                                   "n_seekers": (1, 1), "blowup_speed": 1e-3}, 2, seed=0)
    try:
        env.reset()
        action = np.tile(np.array([10, 5, 5, 0, 0]), (env.num_rows, 1))
        step = env.step(action)
        assert step.episodes == []
        assert step.discarded is not None and step.discarded.all()
        assert not step.valid.any() and step.truncated.all()
    finally:
        env.close()


def test_self_play_records_no_game_for_a_discarded_episode():
    """The actor's self-play bookkeeping (jaxsrl/workers/actor/opponents.py): a game that
    ended for discard gives no game record (no rating update); the next one does."""
    from jaxsrl.workers.actor.opponents import SelfPlayDraws

    draws = SelfPlayDraws(1.0, [np.array([0]), np.array([1])], ["hider", "seeker"], 1,
                          np.random.default_rng(0))
    done, ones = np.ones(2, bool), np.ones(2, np.float32)
    draws.stepped(ones, done, np.zeros(2, bool), discarded=np.ones(2, bool))
    assert draws.take_games() == []
    draws.stepped(ones, done, np.ones(2, bool))
    assert draws.take_games() == [{"hider": [-1, 1.0], "seeker": [-1, 1.0]}]


@pytest.mark.parametrize("game", [Game, RowGame])
def test_final_obs_is_shared_read_only_zeros_until_an_episode_ends(game):
    """``final_obs`` of a step at which no episode ends is one dict of zeros shared by
    every such step and read-only (a caller cannot change what later steps return); at a
    step where episodes end it holds their last observations, in fresh arrays."""
    env = MultiAgentVectorEnv(lambda discard: game(discard), {"discard": -1}, 2, seed=0)
    env.reset()
    results = [env.step(np.zeros(4, np.int64)) for _ in range(5)]
    key = "obs/ep" if game is RowGame else "obs"
    for k in (0, 2, 4):  # mid-episode
        final = results[k].final_obs[key]
        assert not final.any() and not final.flags.writeable
        with pytest.raises(ValueError):
            final[0] = 1.0
    assert results[0].final_obs is results[2].final_obs
    ended = results[3].final_obs[key]  # every env ends its episode 1 here
    np.testing.assert_array_equal(ended[:, 0], [1.0, 1.0, 1.0, 1.0])
    assert ended.flags.writeable and ended is not results[0].final_obs[key]
