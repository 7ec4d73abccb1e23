"""A population on device actors end to end (issue 30): ``scripts/train.py
--env=gymnax:CartPole-v1 --population=2`` with the CPU path's flags writes each
member's metrics, checkpoints and PBT events, and ``--resume`` continues the lineage."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train
from jaxsrl.workers.population.store import PopulationStore

pytest.importorskip("gymnax")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEMBERS = ("member0", "member1")
SMALL = ["--env=gymnax:CartPole-v1", "--population=2", "--pbt.ready_env_steps=256",
         "--segment_length=16", "--batch_segments=8", "--log_interval_s=0.5",
         "--ppo.hidden_sizes", "16", "--ppo.num_epochs=1", "--ppo.num_minibatches=1"]


def _records(logdir):
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # compiles the members' step twice (train.py, then --resume): about a minute of CPU
def test_a_population_on_device_actors_writes_each_member_then_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    env = dict(os.environ, JAXSRL_PROGRESS="0", PYTHONPATH=REPO_ROOT)
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *SMALL,
         "--total_env_steps=4096", "--eval_every=8", "--eval_episodes=2", f"--logdir={logdir}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "actors on the device" in next(line for line in proc.stderr.splitlines()
                                          if "starts in" in line)
    records = _records(logdir)
    last = records[-1]
    assert last["final"] and last["env_steps"] >= 4096
    assert last["pbt/rounds"] >= 1
    keys = set().union(*records)
    for m in MEMBERS:
        for key in (f"policy_version/{m}", f"loss/total/{m}", f"population/return/{m}",
                    f"population/learning_rate/{m}", f"population/fitness/{m}"):
            assert key in keys, key
    run, store = RunDir(logdir), PopulationStore(logdir)
    versions = {m: last[f"policy_version/{m}"] for m in MEMBERS}
    for m in MEMBERS:  # every member's newest state is checkpointed at its own version
        assert str(versions[m]) in os.listdir(run.checkpoint_dir(m))
    assert len(store.events()) == last.get("pbt/exploits", 0)
    assert "eval/return_mean" in keys  # --eval_every evaluates member0, as on CPU actors
    folder = os.path.dirname(run.eval_file(8))  # v8, or v9 if an exploit bumped member0 first
    with open(os.path.join(folder, sorted(os.listdir(folder))[0])) as f:
        assert list(json.load(f)["checkpoints"]) == ["member0"]
    lineage, state = store.load()
    assert state["round"] == last["pbt/rounds"]

    out = train(load_config(SMALL + ["--total_env_steps=6144", f"--logdir={logdir}", "--resume"]))
    assert out["env_steps"] >= 6144
    resumed = {e["policy"]: e["version"] for e in run.read_events("resumed")}
    assert resumed == versions
    lineage2, state2 = store.load()
    assert state2["round"] > state["round"]  # the round counter continues
    for m, history in lineage["events"].items():  # the lineage is kept, extended
        assert lineage2["events"][m][:len(history)] == history
