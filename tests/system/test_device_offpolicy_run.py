"""Off-policy agents on device actors end to end (issue 30): ``scripts/train.py
--env=gymnax:CartPole-v1 --agent=dqn`` writes metrics (losses, replay size and ratio)
and checkpoints, runs exactly the CPU path's planned learn calls, and ``--resume``
continues (refilling the replay, which is not checkpointed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jaxsrl.core.agent import ReplaySpec
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train
from jaxsrl.workers.learner.replay_setup import planned_updates

pytest.importorskip("gymnax")
from test_device_actors_run import CHILD_ENV, REPO_ROOT, _records  # noqa: E402 (after the skip)

# 128 items per step; 256 to fill, then 4 * 128 / 32 = 16 learn calls per step
SMALL = ["--env=gymnax:CartPole-v1", "--agent=dqn", "--segment_length=16", "--batch_segments=8",
         "--log_interval_s=0.5", "--dqn.hidden_sizes", "16", "--dqn.batch_size=32",
         "--dqn.min_fill=256", "--dqn.replay_ratio=4", "--dqn.capacity=1024"]
SPEC = ReplaySpec(capacity=1024, batch_size=32, replay_ratio=4.0, min_fill=256)


@pytest.mark.slow  # two compiles of the DQN step (run, resume): over a minute of CPU time
def test_dqn_on_device_actors_writes_metrics_and_checkpoints_then_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *SMALL,
                           "--total_env_steps=2048", f"--logdir={logdir}"], cwd=REPO_ROOT,
                          env=CHILD_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "actors on the device" in proc.stderr
    records = _records(logdir)
    last = records[-1]
    assert last["final"] and last["env_steps"] >= 2048
    # one version per learn call, exactly the run's plan (never more: the last step's
    # items past --total_env_steps add no learn calls)
    assert last["policy_version"] == planned_updates(2048, SPEC)
    learning = [r for r in records if "loss" in r]
    assert learning, records
    for key in ("q_mean", "replay/size", "replay/ratio", "replay/samples",
                "replay/priority_mean", "staleness_mean", "episode_return_mean"):
        assert key in learning[-1], key
    # interval means (as the CPU path reports them): the buffer between min fill and full
    assert 256 < learning[-1]["replay/size"] <= 1024
    assert 0 < learning[-1]["replay/ratio"] <= 4.0 + 1e-6  # 0 at min fill, then exactly 4
    run = RunDir(logdir)
    version = last["policy_version"]
    assert os.path.isdir(os.path.join(run.checkpoint_dir("default"), str(version)))

    out = train(load_config(SMALL + ["--total_env_steps=4096", f"--logdir={logdir}", "--resume"]))
    assert out["env_steps"] >= 4096 and out["policy_version"] > version
    assert run.read_events("resumed")[-1]["version"] == version
    assert run.read_events("replay_refill")  # the replay starts empty again
