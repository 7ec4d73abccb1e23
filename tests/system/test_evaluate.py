"""Evaluation (jaxsrl/tools/evaluation.py, scripts/evaluate.py) of a tiny trained run."""

import importlib.util
import json
import os
import textwrap

import dataclasses
from typing import NamedTuple

import imageio.v2 as imageio
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsrl.tools import evaluation
from jaxsrl.core.agent import Agent, AgentFns
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config, to_dict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny PPO CartPole run through the real launcher (config.json + checkpoints)."""
    from jaxsrl.launch.launcher import train  # noqa: PLC0415
    logdir = str(tmp_path_factory.mktemp("eval") / "run")
    train(load_config(SMALL + ["--total_env_steps=1500", f"--logdir={logdir}"]))
    return logdir


def test_load_run_rebuilds_agent_and_restores_newest_checkpoint(run_dir):
    run = evaluation.load_run(logdir=run_dir)
    assert run.agent.name == "ppo" and run.agent_config.hidden_sizes == (16, 16)
    assert run.team_policy == {None: "default"}
    ckpt = run.policies["default"]
    steps = sorted(int(s) for s in os.listdir(os.path.join(run_dir, "checkpoints", "default"))
                   if s.isdigit())
    assert ckpt.step == steps[-1] and ckpt.meta["policy_version"] == steps[-1]
    # The restored parameters are the trained ones, not a fresh init.
    fresh = run.fns.init(jax.random.PRNGKey(0)).params
    diff = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - np.asarray(b)).max()),
                        ckpt.params, fresh)
    assert max(jax.tree.leaves(diff)) > 0


def test_evaluate_deterministic_and_sampled(run_dir):
    run = evaluation.load_run(logdir=run_dir)
    a = evaluation.evaluate(run, episodes=3, deterministic=True, seed=5)
    b = evaluation.evaluate(run, episodes=3, deterministic=True, seed=5)
    assert [e["return"] for e in a.episodes] == [e["return"] for e in b.episodes]
    s = a.summary()
    assert s["episodes"] == 3 and s["deterministic"] is True
    assert s["return_mean"] == pytest.approx(np.mean([e["return"] for e in a.episodes]))
    assert s["return_std"] == pytest.approx(np.std([e["return"] for e in a.episodes]))
    assert all(e["length"] == e["return"] for e in a.episodes)  # CartPole: +1 per step
    sampled = evaluation.evaluate(run, episodes=2, deterministic=False, max_steps=20)
    assert sampled.summary()["deterministic"] is False
    assert all(e["length"] <= 20 for e in sampled.episodes)


def test_cli_logdir_gif_and_json(run_dir, tmp_path, capsys):
    pytest.importorskip("pygame")  # CartPole's rgb_array renderer
    video, out = str(tmp_path / "ep.gif"), str(tmp_path / "eval.json")
    code = _script("evaluate").main(["--logdir", run_dir, "--episodes", "2", "--video", video,
                                     "--video_every", "4", "--max_steps", "40", "--json", out])
    assert code == 0
    text = capsys.readouterr().out
    assert "return  mean" in text and "std" in text and "video:" in text
    frames = imageio.mimread(video)
    with open(out) as f:
        data = json.load(f)
    assert data["summary"]["episodes"] == 2 and len(data["episodes"]) == 2
    # Every evaluated episode is in the video: its reset frame, every 4th step, its last.
    lengths = [e["length"] for e in data["episodes"]]
    written = sum(1 + n // 4 + (n % 4 > 0) for n in lengths)
    assert data["summary"]["video_frames"] == written and f"({written} frames)" in text
    # (Pillow merges identical neighbouring GIF frames; one episode alone has <= 11.)
    assert 11 < len(frames) <= written and frames[0].ndim == 3


def test_video_episode_records_only_that_episode(run_dir, tmp_path):
    pytest.importorskip("pygame")
    run = evaluation.load_run(logdir=run_dir)
    video = str(tmp_path / "one.gif")
    result = evaluation.evaluate(run, episodes=3, video=video, video_episode=1, max_steps=5,
                                 video_every=5)
    assert result.video == video and result.video_frames == 2  # reset + step 5 of episode 1


def test_cli_checkpoint_path_with_step(run_dir, capsys):
    policy_dir = os.path.join(run_dir, "checkpoints", "default")
    step = min(int(s) for s in os.listdir(policy_dir) if s.isdigit())
    code = _script("evaluate").main(["--checkpoint", os.path.join(policy_dir, str(step)),
                                     "--episodes", "1", "--sample", "--max_steps", "10"])
    assert code == 0
    assert f"default/{step} (version {step}" in capsys.readouterr().out
    run = evaluation.load_run(checkpoint=os.path.join(policy_dir, str(step)))
    assert run.policies["default"].step == step


def test_cli_errors_exit_2(tmp_path, capsys):
    assert _script("evaluate").main(["--logdir", str(tmp_path), "--episodes", "1"]) == 2
    assert "config" in capsys.readouterr().err


def test_mp4_or_gif_fallback(run_dir, tmp_path, monkeypatch):
    from jaxsrl.tools import video  # noqa: PLC0415
    frames = [np.full((33, 50, 3), i * 20, np.uint8) for i in range(6)]  # odd height
    if video.mp4_available():
        path = evaluation.write_video(str(tmp_path / "a.mp4"), frames, fps=10)
        assert path.endswith(".mp4") and os.path.getsize(path) > 0
        assert len(imageio.mimread(path)) == 6
    monkeypatch.setattr(video, "mp4_available", lambda: False)
    path = evaluation.write_video(str(tmp_path / "b.mp4"), frames, fps=10)
    assert path.endswith("b.gif") and len(imageio.mimread(path)) == 6
    with pytest.raises(ValueError, match="no frames"):
        evaluation.write_video(str(tmp_path / "c.gif"), [], fps=10)
    with pytest.raises(ValueError, match="must end in .mp4 or .gif"):
        evaluation.write_video(str(tmp_path / "c.avi"), frames, fps=10)


# A user's Gymnasium env whose constructor has no render_mode keyword (trains fine: the
# actors never pass one), and one that takes render_mode but declares no render modes.
USER_ENVS = textwrap.dedent('''
    import gymnasium
    import numpy as np

    class Corridor(gymnasium.Env):
        observation_space = gymnasium.spaces.Box(0.0, 1.0, (1,), np.float32)
        action_space = gymnasium.spaces.Discrete(2)

        def __init__(self, length=3):
            self.length = length

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.pos = max(0, self.pos + (1 if action == 1 else -1))
            done = self.pos >= self.length
            return np.array([self.pos / self.length], np.float32), float(done), done, False, {}

    class Unrendered(Corridor):
        def __init__(self, length=3, render_mode=None):
            super().__init__(length)
            self.render_mode = render_mode

    gymnasium.register("EvalCorridor-v0", entry_point=Corridor, max_episode_steps=8)
    gymnasium.register("EvalUnrendered-v0", entry_point=Unrendered, max_episode_steps=8)
''')


def _user_env_run(tmp_path, monkeypatch, env):
    """A run folder of PPO on a user env, with an initial checkpoint written directly."""
    (tmp_path / "eval_user_envs.py").write_text(USER_ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    logdir = tmp_path / env.split(":")[1]
    cfg = load_config([f"--env={env}", f"--logdir={logdir}", "--ppo.hidden_sizes", "8"])
    os.makedirs(logdir)
    (logdir / "config.json").write_text(json.dumps(to_dict(cfg)))
    from agents import AGENTS  # noqa: PLC0415
    from jaxsrl.core.agent import EnvSpec  # noqa: PLC0415
    from jaxsrl.envs import env_spaces  # noqa: PLC0415
    fns = AGENTS["ppo"].make(cfg.ppo, EnvSpec(*env_spaces(cfg.env, cfg.env_kwargs)), 1)
    ckpt = Checkpointer(str(logdir / "checkpoints" / "default"))
    ckpt.save(1, {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)},
              {"policy_version": 1})
    ckpt.close()
    return str(logdir)


def test_a_user_env_without_render_mode_evaluates_and_its_video_is_a_named_error(
        tmp_path, monkeypatch, capsys):
    logdir = _user_env_run(tmp_path, monkeypatch, "eval_user_envs:EvalCorridor-v0")
    run = evaluation.load_run(logdir=logdir)
    result = evaluation.evaluate(run, episodes=2)  # no render_mode reaches the constructor
    assert all(3 <= e["length"] <= 8 for e in result.episodes)  # the corridor, its time limit
    code = _script("evaluate").main(["--logdir", logdir, "--episodes", "1",
                                     "--video", str(tmp_path / "c.gif")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'eval_user_envs:EvalCorridor-v0' cannot record a video" in err
    assert "render_mode" in err and not os.path.exists(tmp_path / "c.gif")


def test_an_env_that_cannot_render_is_a_named_error_not_an_assertion(tmp_path, monkeypatch):
    logdir = _user_env_run(tmp_path, monkeypatch, "eval_user_envs:EvalUnrendered-v0")
    run = evaluation.load_run(logdir=logdir)
    with pytest.raises(ValueError, match=r"'eval_user_envs:EvalUnrendered-v0' cannot record "
                                         r"a video: its metadata\['render_modes'\] is \[\]"):
        evaluation.evaluate(run, episodes=1, video=str(tmp_path / "u.gif"))


HS_TEAMS = """
[env_kwargs]
horizon = 6

[dataflow]
actors = [{name = "actors", count = 1, teams = {hider = ["inf_h", "smp_h"], seeker = ["inf_s", "smp_s"]}}]
policy_workers = [
  {name = "server_h", inference_stream = "inf_h", policy = "hider"},
  {name = "server_s", inference_stream = "inf_s", policy = "seeker"},
]
trainers = [
  {name = "learner_h", sample_stream = "smp_h", policy = "hider"},
  {name = "learner_s", sample_stream = "smp_s", policy = "seeker"},
]
"""


def test_hide_and_seek_policy_per_team_with_video(tmp_path):
    """A hide-and-seek run folder with a policy per team (checkpoints written directly):
    each team's agents are one batch for its policy."""
    toml = tmp_path / "teams.toml"
    toml.write_text(HS_TEAMS)
    logdir = tmp_path / "hs"
    cfg = load_config(["--env=hide_and_seek", f"--config={toml}", f"--logdir={logdir}",
                       "--ppo.hidden_sizes", "8"])
    os.makedirs(logdir)
    (logdir / "config.json").write_text(json.dumps(to_dict(cfg)))
    with pytest.raises(FileNotFoundError):  # no checkpoint yet
        evaluation.load_run(logdir=str(logdir))
    from agents import AGENTS  # noqa: PLC0415
    from jaxsrl.core.agent import EnvSpec  # noqa: PLC0415
    from jaxsrl.envs import env_spaces  # noqa: PLC0415
    fns = AGENTS["ppo"].make(cfg.ppo, EnvSpec(*env_spaces(cfg.env, cfg.env_kwargs)), 1)
    for i, team in enumerate(["hider", "seeker"]):
        ckpt = Checkpointer(str(logdir / "checkpoints" / team))
        ckpt.save(7, {"agent": fns.init(jax.random.PRNGKey(i)), "rng": jax.random.PRNGKey(i)},
                  {"policy_version": 7, "env_steps": 100})
        ckpt.close()

    run = evaluation.load_run(logdir=str(logdir))
    assert run.team_policy == {"hider": "hider", "seeker": "seeker"}
    video = str(tmp_path / "hs.gif")
    result = evaluation.evaluate(run, episodes=2, deterministic=False, video=video)
    s = result.summary()
    assert {"return_mean/hider", "return_std/hider", "return_mean/seeker"} <= set(s)
    assert all(e["length"] == 6 for e in result.episodes)
    assert "episode/hider_seen_fraction" in s
    assert result.video_frames == 14  # both episodes: reset frame + one per step
    assert len(imageio.mimread(video)) == 14
    text = evaluation.format_summary(run, s)
    # A zero-sum team game: per-team returns, no overall "return mean" line.
    lines = text.splitlines()
    assert "return  mean" not in text
    i = next(i for i, line in enumerate(lines) if line.startswith("return per team"))
    assert "episodes, sampled actions" in lines[i - 1] and "episode length mean 6.0" in lines[i]
    assert lines[i + 1].split()[:2] == ["hider", "mean"]
    assert lines[i + 2].split()[:2] == ["seeker", "mean"]
    # One policy for everyone, by name.
    run = evaluation.load_run(logdir=str(logdir), policy="seeker")
    assert list(run.policies) == ["seeker"] and run.policy_for("hider") == "seeker"


# A recurrent agent whose carry counts steps: push right for 3 steps, then left.
@dataclasses.dataclass(frozen=True)
class CounterConfig:
    pass


class CounterState(NamedTuple):
    params: dict


def _counter_make(config, spec, num_updates):
    def init(rng):
        return CounterState({"w": jnp.zeros(())})

    def act(params, obs, carry, rng, *, deterministic=False):
        action = jnp.where(carry < 3, 1, 0).astype(jnp.int32)
        return action, carry + 1, {"logp": jnp.zeros(action.shape, jnp.float32)}

    def initial_carry(n):
        return jnp.zeros((n,), jnp.int32)

    return AgentFns(init, act, None, initial_carry)


COUNTER = Agent("counter", CounterConfig, _counter_make)


def test_recurrent_carry_starts_fresh_every_episode(tmp_path):
    logdir = tmp_path / "rec"
    os.makedirs(logdir)
    (logdir / "config.json").write_text(json.dumps(
        {"agent": "counter", "env": "CartPole-v1", "env_kwargs": None, "counter": {},
         "num_actors": 1, "dataflow": None}))
    ckpt = Checkpointer(str(logdir / "checkpoints" / "default"))
    ckpt.save(1, {"agent": CounterState({"w": jnp.zeros(())}), "rng": jax.random.PRNGKey(0)},
              {"policy_version": 1})
    ckpt.close()
    run = evaluation.load_run(logdir=str(logdir), agents={"counter": COUNTER})
    both = evaluation.evaluate(run, episodes=2, seed=0).episodes
    second_alone = evaluation.evaluate(run, episodes=1, seed=1).episodes
    # Episode 1 (seed 1) acts exactly as when it is the first episode: the carry was reset.
    assert both[1]["length"] == second_alone[0]["length"]
