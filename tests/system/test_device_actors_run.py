"""Device actors end to end (issue 30): ``scripts/train.py --env=jax:jax_cartpole:make``
(``tests/jax_cartpole.py``, a user's own JAX-native env: no extra needed) writes the run
folder a CPU run writes, and ``--resume`` continues it; ``gymnax:CartPole-v1`` does the
same where gymnax is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(TESTS)
CARTPOLE = "jax:jax_cartpole:make"  # tests/jax_cartpole.py
RUN = ["--segment_length=16", "--batch_segments=8", "--log_interval_s=0.5",
       "--ppo.hidden_sizes", "16", "16"]
SMALL = [f"--env={CARTPOLE}", *RUN]
#: train.py finds the user's module (tests/jax_cartpole.py) on PYTHONPATH.
CHILD_ENV = dict(os.environ, JAXSRL_PROGRESS="0",
                 PYTHONPATH=os.pathsep.join([REPO_ROOT, TESTS]))


def _records(logdir):
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("env_id", [CARTPOLE, "gymnax:CartPole-v1"])
def test_train_py_on_device_actors_then_resume(tmp_path, env_id):
    if env_id.startswith("gymnax:"):
        pytest.importorskip("gymnax")
    small = [f"--env={env_id}", *RUN]
    logdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *small,
         "--total_env_steps=2048", f"--logdir={logdir}"],
        cwd=REPO_ROOT, env=CHILD_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first_line = next(line for line in proc.stderr.splitlines() if "starts in" in line)
    assert "actors on the device" in first_line and "JAX-native" in first_line
    records = _records(logdir)
    last = records[-1]
    assert last["final"] and last["env_steps"] >= 2048
    assert last["policy_version"] == last["env_steps"] // (8 * 16)
    interval = next(r for r in records if "fps" in r and r["env_steps"])
    for key in ("episode_return_mean", "episode_length_mean", "loss/total", "staleness_mean"):
        assert key in interval, key
    run = RunDir(logdir)
    assert run.read_config()["env"] == env_id
    assert os.path.isdir(os.path.join(run.checkpoint_dir("default"), str(last["policy_version"])))

    version = last["policy_version"]
    out = train(load_config(small + ["--total_env_steps=4096", f"--logdir={logdir}", "--resume"]))
    assert out["env_steps"] >= 4096 and out["policy_version"] > version
    resumed = [e for e in run.read_events("resumed")]
    assert resumed and resumed[-1]["version"] == version

    # A --resume that changes the network is refused in one line naming the setting,
    # before anything is written: config.json, the events and the checkpoints unchanged.
    before = {name: open(os.path.join(logdir, name), "rb").read()
              for name in ("config.json", "run_events.jsonl", "metrics.jsonl")}
    steps = sorted(os.listdir(run.checkpoint_dir("default")))
    changed = [a if a != "16" else "32" for a in small]  # --ppo.hidden_sizes 32 32
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *changed,
         "--total_env_steps=8192", f"--logdir={logdir}", "--resume"],
        cwd=REPO_ROOT, env=CHILD_ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert "changes the learner state's structure: ppo.hidden_sizes [16, 16] -> [32, 32]" in line
    assert before == {name: open(os.path.join(logdir, name), "rb").read() for name in before}
    assert sorted(os.listdir(run.checkpoint_dir("default"))) == steps


@pytest.mark.slow  # a third compile of the fused step (~20 s of CPU)
def test_sigterm_saves_a_checkpoint_that_matches_the_closing_line(tmp_path):
    """Ctrl-C/SIGTERM mid-run: exit 130, a checkpoint of the newest state and a closing
    line counting exactly the updates it holds (batch_segments x segment_length each)."""
    import signal
    import time
    logdir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *SMALL,
         "--total_env_steps=1000000000", f"--logdir={logdir}"],
        cwd=REPO_ROOT, env=CHILD_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # a generous bound for the first metrics line
        while not (os.path.exists(os.path.join(logdir, "metrics.jsonl"))
                   and any("fps" in r for r in _records(logdir))):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    last = _records(logdir)[-1]
    assert last["final"]
    assert last["env_steps"] == last["policy_version"] * 8 * 16
    steps = sorted(int(n) for n in os.listdir(RunDir(logdir).checkpoint_dir("default")) if n.isdigit())
    assert steps[-1] == last["policy_version"]


@pytest.mark.slow  # two more compiles of a fused step (~40 s of CPU)
def test_a_recurrent_agent_runs_on_device_actors_then_resumes(tmp_path):
    """A recurrent agent (``tests/recurrent_box_agent.py``; its carry rides with the
    environments') trains and resumes on device actors; it used to be refused."""
    logdir = str(tmp_path / "run")
    small = [f"--env={CARTPOLE}", "--segment_length=16", "--batch_segments=8",
             "--agent=recurrent_box_agent:AGENT", "--ppo_prev.hidden_sizes", "16", "16",
             f"--logdir={logdir}"]
    out = train(load_config(small + ["--total_env_steps=1024"]))
    assert out["env_steps"] >= 1024 and out["policy_version"] == out["env_steps"] // (8 * 16)
    out2 = train(load_config(small + ["--total_env_steps=2048", "--resume"]))
    assert out2["policy_version"] > out["policy_version"]
    assert os.path.isdir(os.path.join(RunDir(logdir).checkpoint_dir("default"),
                                      str(out2["policy_version"])))
