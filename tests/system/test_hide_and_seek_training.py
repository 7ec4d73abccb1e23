"""The main job, tiny: hide-and-seek through real actor processes with the recurrent policy."""

import json
import os

import jax
import numpy as np
import psutil

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs import env_spaces

from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train

TINY = ["--env=hide_and_seek", "--num_actors=1", "--envs_per_actor=2", "--segment_length=8",
        "--batch_segments=8", "--log_interval_s=1", "--ppo.hidden_sizes", "8",
        "--ppo.attention_heads=1", "--ppo.num_minibatches=2", "--ppo.num_epochs=1"]


def test_hide_and_seek_trains_with_per_team_metrics(tmp_path):
    logdir = str(tmp_path / "run")
    cfg = load_config(TINY + ["--total_env_steps=480", f"--logdir={logdir}"])
    assert cfg.ppo.network == "entity_lstm"  # from configs/hide_and_seek.toml
    record = train(cfg)
    assert record["env_steps"] >= 480
    assert record["policy_version"] >= 2
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    keys = set().union(*records)
    # 480 env steps > 80-step horizon x 2 envs: whole episodes were reported per team.
    assert {"episode_return_mean/hider", "episode_return_mean/seeker"} <= keys
    assert any(k.startswith("episode/box_move_prep") for k in keys)
    for r in records:
        if "episode_return_mean/hider" in r:  # zero-sum per step: team returns mirror
            assert abs(r["episode_return_mean/hider"] + r["episode_return_mean/seeker"]) < 1e-6 or \
                r.get("episode/agent_out_steps", 0) > 0
    # The normalisers travel in the checkpoint with the parameters, updated by learning.
    agent = get_agent("ppo")
    fns = agent.make(cfg.ppo, EnvSpec(*env_spaces("hide_and_seek")), 10)
    like = {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)}
    ckpt = Checkpointer(os.path.join(logdir, "checkpoints", "default"))
    tree, meta = ckpt.restore(like)
    ckpt.close()
    assert meta["policy_version"] >= 2
    params = tree["agent"].params
    assert float(params["obs_stats"]["self"].count) > 100  # observations were counted
    assert float(params["ret_stats"].count) > 100
    assert not np.allclose(np.asarray(params["obs_stats"]["lidar"].mean), 0.0)
    assert psutil.Process().children(recursive=True) == []
