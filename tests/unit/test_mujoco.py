"""MuJoCo (Gymnasium) through the whole dataflow: Box observations and Box actions."""

import json
import os

import numpy as np

from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train


def test_halfcheetah_trains_through_real_actor_processes(tmp_path):
    logdir = str(tmp_path / "run")
    # The configs/HalfCheetah-v5.toml file applies (normalisation on), made tiny here.
    cfg = load_config(["--env=HalfCheetah-v5", "--total_env_steps=3000", "--num_actors=1",
                       "--segment_length=32", "--batch_segments=8", "--ppo.num_minibatches=4",
                       "--ppo.num_epochs=2", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16",
                       f"--logdir={logdir}"])
    assert cfg.ppo.normalize_observations and cfg.ppo.normalize_values
    record = train(cfg)
    assert record["env_steps"] >= 3000  # samples flowed
    assert record["policy_version"] >= 2  # the learner updated
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    losses = [r["loss/total"] for r in records if "loss/total" in r]
    assert losses and np.all(np.isfinite(losses))


def test_mujoco_configs_resolve():
    for env in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"):
        cfg = load_config([f"--env={env}"])
        assert cfg.ppo.normalize_observations, env
        assert cfg.total_env_steps == 1_000_000, env
