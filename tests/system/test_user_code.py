"""Your own agents, environments and config files, without editing the framework:
``--agent=module:OBJ``, ``--env=module:EnvId`` / ``module:factory``, ``--env_kwargs.KEY``
flags and ``--config`` files layered over ``configs/<env>.toml``."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.envs import env_spaces, env_teams, make_actor_env
from jaxsrl.core.paths import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A Gymnasium env registered by the user's own module (not by jaxsrl).
CORRIDOR = textwrap.dedent('''
    import gymnasium
    import numpy as np

    class Corridor(gymnasium.Env):
        """Walk right to the end of a corridor of `length` cells (reward 1 there)."""
        observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def __init__(self, length=5):
            self.length = length

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.pos = max(0, self.pos + (1 if action == 1 else -1))
            done = self.pos >= self.length
            return np.array([self.pos / self.length], np.float32), float(done), done, False, {}

    gymnasium.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
''')

# A PettingZoo parallel game of two teams, built by a factory function.
DUEL = textwrap.dedent('''
    import gymnasium
    import numpy as np
    from pettingzoo import ParallelEnv

    class Duel(ParallelEnv):
        """Each agent picks 0/1; the red team scores when the actions match."""
        metadata = {"name": "duel"}

        def __init__(self, horizon=4):
            self.possible_agents = ["red_0", "blue_0"]
            self.horizon = horizon

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
            match = float(actions["red_0"] == actions["blue_0"])
            rew = {"red_0": match, "blue_0": -match}
            obs = {a: np.array([match, self.t / self.horizon], np.float32) for a in self.agents}
            end = self.t >= self.horizon
            return obs, rew, {a: False for a in self.agents}, {a: end for a in self.agents}, \\
                {a: {} for a in self.agents}

    def make_duel(horizon=4):
        return Duel(horizon)
''')

TINY = ["--num_actors=1", "--envs_per_actor=4", "--segment_length=8", "--batch_segments=4",
        "--log_interval_s=0.5", "--compilation_cache_dir="]


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """corridor.py and duel.py importable here and in child processes (PYTHONPATH)."""
    (tmp_path / "corridor.py").write_text(CORRIDOR)
    (tmp_path / "duel.py").write_text(DUEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


# -- agents ---------------------------------------------------------------------------

def test_an_agent_of_your_own_module_is_used_by_reference():
    cfg = load_config(["--agent=examples.a2c:AGENT", "--a2c.learning_rate=0.005"])
    assert cfg.agent == "examples.a2c:AGENT"
    assert cfg.agent_config().learning_rate == 0.005
    assert type(cfg.agent_config()).__name__ == "A2CConfig"


@pytest.mark.parametrize("agent, match", [
    ("nosuchmodule_xyz:AGENT", "cannot import module 'nosuchmodule_xyz'"),
    ("examples.a2c:NOPE", "module 'examples.a2c' has no attribute 'NOPE'"),
    ("examples.a2c:A2CConfig", "is a type, not a jaxsrl.core.agent.Agent"),
    ("nosuchagent", "unknown agent 'nosuchagent'.*package.module:AGENT"),
])
def test_bad_agent_references_name_the_problem(agent, match):
    with pytest.raises(ValueError, match=match):
        load_config([f"--agent={agent}"])


def test_a_users_agents_folder_is_named_as_shadowed_and_its_file_form_works(tmp_path, monkeypatch):
    """./agents/vpg.py (no __init__.py) under jaxsrl's own top-level ``agents`` package:
    ``agents.vpg`` cannot be imported, and the error says why and the way out; the file
    form loads it, here and in a child process started in the same directory."""
    (tmp_path / "agents").mkdir()
    with open(os.path.join(ROOT, "examples", "a2c.py")) as f:
        (tmp_path / "agents" / "vpg.py").write_text(f.read())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as err:
        load_config(["--agent=agents.vpg:AGENT"])
    assert str(err.value) == (
        "--agent=agents.vpg:AGENT: 'agents' is jaxsrl's own agents package; your folder "
        "./agents is shadowed: rename it or use --agent=agents/vpg.py:AGENT")
    cfg = load_config(["--agent=agents/vpg.py:AGENT", "--a2c.learning_rate=0.005"])
    assert cfg.agent == "agents/vpg.py:AGENT" and cfg.agent_config().learning_rate == 0.005
    assert type(cfg.agent_config()).__name__ == "A2CConfig"
    code = "from agents import get_agent; print(get_agent('agents/vpg.py:AGENT').name)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=child_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "a2c"
    with pytest.raises(ValueError, match="--agent=agents/nope.py:AGENT: no such file 'agents/nope.py'"):
        load_config(["--agent=agents/nope.py:AGENT"])
    # Your ./agents/ppo.py is not silently replaced by jaxsrl's agents.ppo either.
    (tmp_path / "agents" / "ppo.py").write_text("")
    with pytest.raises(ValueError, match="your folder ./agents is shadowed: rename it or use "
                                         "--agent=agents/ppo.py:AGENT"):
        load_config(["--agent=agents.ppo:AGENT"])
    monkeypatch.chdir(ROOT)  # jaxsrl's own checkout: its agents folder is the package
    assert load_config(["--agent=agents.ppo:AGENT"]).agent_config().__class__.__name__ == "PPOConfig"


def test_help_lists_builtin_agents_config_files_and_env_kwargs(capsys):
    with pytest.raises(SystemExit):
        load_config(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Built-in agents: dqn, impala, ppo, sac" in out
    assert "--config FILE" in out and "--env_kwargs.KEY=VALUE" in out
    assert "--overwrite" in out


# -- config files and env kwargs ------------------------------------------------------

def test_config_files_layer_over_the_env_file_in_order(tmp_path):
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text("num_actors = 3\nsegment_length = 16\n[ppo]\nlearning_rate = 0.01\n")
    second.write_text("num_actors = 4\n[env_kwargs]\nhorizon = 40\n")
    cfg = load_config(["--env=hide_and_seek", f"--config={first}", f"--config={second}",
                       "--segment_length=8"])
    # configs/hide_and_seek.toml is kept below the files: its network and env settings stay.
    assert cfg.ppo.network == "entity_lstm"
    assert cfg.ppo.learning_rate == 0.01  # first file over the env file
    assert cfg.num_actors == 4  # second file over the first
    assert cfg.segment_length == 8  # flags last
    assert cfg.env_kwargs["horizon"] == 40


def test_env_kwargs_flags_are_typed_and_saved_in_the_config(tmp_path):
    cfg = load_config(["--env=CartPole-v1", "--env_kwargs.max_episode_steps=50",
                       "--env_kwargs.sutton_barto_reward", "true", "--env_kwargs.render_mode=rgb"])
    assert cfg.env_kwargs == {"max_episode_steps": 50, "sutton_barto_reward": True,
                              "render_mode": "rgb"}
    from jaxsrl.experiment.config import to_dict
    assert to_dict(cfg)["env_kwargs"]["max_episode_steps"] == 50


@pytest.mark.parametrize("flag, match", [
    ("--env_kwargs=3", "--env_kwargs.KEY=VALUE"),
    ("--env_kwargs.1x=3", "'1x' is not a keyword argument name"),
    ("--env_kwargs.horizon", "needs a value"),
])
def test_malformed_env_kwargs_flags_are_named(flag, match):
    with pytest.raises(ValueError, match=match):
        load_config([flag])


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="no_such.toml"):
        load_config([f"--config={tmp_path / 'no_such.toml'}"])


# -- environments ---------------------------------------------------------------------

def test_a_gymnasium_env_of_your_own_module(user_modules):
    cfg = load_config(["--env=corridor:Corridor-v0", "--env_kwargs.length=3"])
    obs_space, action_space = env_spaces(cfg.env, cfg.env_kwargs)
    assert obs_space.shape == (1,) and action_space.n == 2
    assert env_teams(cfg.env) == [None]


def test_actor_processes_import_the_envs_module(user_modules):
    # A fresh interpreter (as an actor is) builds the env from its name alone.
    code = ("from jaxsrl.envs import make_actor_env; import numpy as np; "
            "env = make_actor_env('corridor:Corridor-v0', 2, 0, {'length': 2}); env.reset(); "
            "print(sum(len(env.step(np.ones(2, np.int64)).episodes) for _ in range(2)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=child_env())  # what actors get: this checkout + PYTHONPATH
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"  # both corridors of length 2 walked to the end


def test_a_pettingzoo_factory_of_your_own_module(user_modules):
    assert env_teams("duel:make_duel") == ["red", "blue"]
    env = make_actor_env("duel:make_duel", 2, 0, {"horizon": 2})
    assert env.num_rows == 4 and env.row_team == ["red", "blue", "red", "blue"]


def test_unknown_names_in_a_users_module_are_named(user_modules):
    with pytest.raises(ValueError, match="unknown environment 'corridor:Nope-v0'.*registered no"):
        load_config(["--env=corridor:Nope-v0"])
    with pytest.raises(ValueError, match="cannot import module 'nosuchmod_q'"):
        load_config(["--env=nosuchmod_q:Foo-v0"])


def test_your_agent_and_game_train_through_actor_processes(user_modules, tmp_path):
    """The example A2C agent on the user's two-team game, end to end: actors import
    duel.py, each team has its own policy, metrics are per policy and per team."""
    from jaxsrl.launch.launcher import train
    toml = tmp_path / "teams.toml"
    toml.write_text(textwrap.dedent('''
        [dataflow]
        actors = [{name = "actors", count = 1, teams = {red = ["inf_r", "smp_r"], blue = ["inf_b", "smp_b"]}}]
        policy_workers = [{name = "server_r", inference_stream = "inf_r", policy = "red"},
                          {name = "server_b", inference_stream = "inf_b", policy = "blue"}]
        trainers = [{name = "learner_r", sample_stream = "smp_r", policy = "red"},
                    {name = "learner_b", sample_stream = "smp_b", policy = "blue"}]
    '''))
    logdir = tmp_path / "run"
    cfg = load_config(["--agent=examples.a2c:AGENT", "--env=duel:make_duel", f"--config={toml}",
                       "--total_env_steps=12000", f"--logdir={logdir}", "--a2c.hidden_sizes", "8",
                       *TINY])
    # 12k steps: the first update of each learner (compile included) lands well before
    # the budget, which counts env steps, not updates (RunConfig.total_env_steps).
    record = train(cfg)
    assert record["env_steps"] >= 12000
    assert {"episode_return_mean/red", "episode_return_mean/blue"} <= set(record)  # last known
    with open(logdir / "metrics.jsonl") as f:
        keys = {k for line in f for k in json.loads(line)}
    assert {"loss/total/red", "loss/total/blue", "entropy/red"} <= keys
    saved = json.loads((logdir / "config.json").read_text())
    assert saved["agent"] == "examples.a2c:AGENT" and saved["a2c"]["hidden_sizes"] == [8]
