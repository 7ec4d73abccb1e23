"""Self-play opponent pools end to end (serial launcher, a rigged two-team game): the
pools grow, ratings and pool sizes are logged, the league table is written, and
``--resume`` restores the pools' snapshots and the ratings."""

from __future__ import annotations

import json
import textwrap

from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train
from jaxsrl.tools.league import league_table
from jaxsrl.tools.plotting import plot_runs
from jaxsrl.workers.population.league_store import LeagueStore

# Red wins every step whatever anyone does: a rigged game.
RIGGED = textwrap.dedent('''
    import gymnasium
    import numpy as np

    class Rigged:
        possible_agents = ["red_0", "blue_0"]

        def __init__(self, horizon=4):
            self.horizon, self.agents, self.t = horizon, [], 0

        def observation_space(self, agent):
            return gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32)

        def action_space(self, agent):
            return gymnasium.spaces.Discrete(2)

        def team_of(self, agent):
            return agent.split("_")[0]

        def reset(self, seed=None, options=None):
            self.agents, self.t = list(self.possible_agents), 0
            return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

        def step(self, actions):
            self.t += 1
            obs = {a: np.array([float(actions[a]), self.t / self.horizon], np.float32)
                   for a in self.agents}
            end = self.t >= self.horizon
            return (obs, {"red_0": 1.0, "blue_0": -1.0}, {a: False for a in self.agents},
                    {a: end for a in self.agents}, {a: {} for a in self.agents})

        def close(self):
            pass

    def make_rigged(horizon=4):
        return Rigged(horizon)
''')

CONFIG = textwrap.dedent('''
    [dataflow]
    actors = [{name = "actors", count = 1, teams = {red = ["inf_r", "smp_r"], blue = ["inf_b", "smp_b"]}}]
    policy_workers = [{name = "server_r", inference_stream = "inf_r", policy = "red"},
                      {name = "server_b", inference_stream = "inf_b", policy = "blue"}]
    trainers = [{name = "learner_r", sample_stream = "smp_r", policy = "red"},
                {name = "learner_b", sample_stream = "smp_b", policy = "blue"}]
    [opponents]
    snapshot_every = 2
    max_size = 3
    p_latest = 0.5
    save_interval_s = 1.0
''')

FLAGS = ["--agent=examples.a2c:AGENT", "--env=rigged:make_rigged", "--launcher=serial",
         "--envs_per_actor=4", "--segment_length=4", "--batch_segments=4",
         "--log_interval_s=0.5", "--compilation_cache_dir=", "--a2c.hidden_sizes", "8"]


def _records(logdir):
    with open(logdir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def test_pools_grow_ratings_are_logged_and_resume_restores_them(tmp_path, monkeypatch):
    (tmp_path / "rigged.py").write_text(RIGGED)
    (tmp_path / "sp.toml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    logdir = tmp_path / "run"
    flags = FLAGS + [f"--config={tmp_path / 'sp.toml'}", f"--logdir={logdir}"]
    train(load_config(flags + ["--total_env_steps=2500"]))
    records = _records(logdir)
    sizes = [r["selfplay/pool_size/red"] for r in records if "selfplay/pool_size/red" in r]
    assert sizes and max(sizes) == 3 and sizes == sorted(sizes)  # grew, capped at max_size
    assert any("selfplay/rating/blue/latest" in r for r in records)
    assert max(r.get("selfplay/games_vs_snapshot/red", 0) for r in records) > 0
    # The rigged game: red's latest policy rates above blue's.
    table = {row["id"]: row for row in LeagueStore(str(logdir)).read_table()}
    assert table["red:latest"]["ordinal"] > table["blue:latest"]["ordinal"]
    assert table["red:latest"]["wins"] == table["red:latest"]["games"] > 0
    assert (logdir / "selfplay" / "league.md").exists()
    assert league_table(str(logdir)).splitlines()[2].startswith("| 1 | red | ")  # the winners lead
    written = plot_runs([str(logdir)], str(tmp_path / "curves.png"))
    assert str(tmp_path / "curves_selfplay.png") in written

    store = LeagueStore(str(logdir))
    state = store.read_state()
    store.close()
    saved_games = state["totals"]["games"]
    saved_red = next(r for r in state["ratings"]["rows"] if r["id"] == "red:latest")

    train(load_config(["--resume", f"--logdir={logdir}", "--total_env_steps=3500",
                       "--launcher=serial"]))
    resumed = _records(logdir)[len(records):]
    games = [r["selfplay/games"] for r in resumed if "selfplay/games" in r]
    assert games and games[0] >= saved_games  # counted on from the saved total
    assert min(r["selfplay/pool_size/red"] for r in resumed if "selfplay/pool_size/red" in r) >= 1
    table = {row["id"]: row for row in LeagueStore(str(logdir)).read_table()}
    assert table["red:latest"]["games"] > saved_red["games"]  # the rating went on from the saved one
