"""The run contract holds on device actors as on CPU actors (issue 41): non-finite values
are never kept (``--on_nonfinite``), counts are exact (env steps, learn calls, each
checkpoint's record), a refused resume writes nothing, and Ctrl-C during a long
compiled call stops the run with a checkpoint. The envs are ``tests/jax_hostile_envs.py``'s
and ``tests/jax_cartpole.py``'s (no extra needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxsrl.experiment import checkpoint as ckpt_lib
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.resume import ResumeRefused
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import ComponentDied, train

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(TESTS)
SMALL = ["--segment_length=16", "--batch_segments=8", "--log_interval_s=0.5",
         "--ppo.hidden_sizes", "16", "16", "--compilation_cache_dir="]
STEP = 8 * 16  # env steps of one update
NAN = "jax:tests.jax_hostile_envs:make_nan"


def _records(logdir):
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _saved(logdir, policy="default"):
    """``{version: (meta, every float leaf finite)}`` of every checkpoint of ``policy``."""
    directory = RunDir(logdir).checkpoint_dir(policy)
    ckpt = ckpt_lib.Checkpointer(directory, max_to_keep=100)
    out = {}
    try:
        for step in ckpt_lib.finalised_steps(directory):
            with open(os.path.join(directory, str(step), "meta", "metadata")) as f:
                meta = json.load(f)
            leaves = [np.asarray(x) for x in jax.tree.leaves(ckpt.restore_item(step, "state"))]
            out[step] = (meta, all(np.isfinite(x).all() for x in leaves
                                   if np.issubdtype(x.dtype, np.floating)))
    finally:
        ckpt.close()
    return out


def test_nan_rewards_are_skipped_and_never_kept_or_checkpointed(tmp_path):
    """``--on_nonfinite=drop`` (the default): the updates of trajectories holding a NaN
    reward are skipped and counted, the policy version counts only the kept ones, and
    no checkpoint holds a NaN (before the fix every leaf of the final state was NaN)."""
    logdir = str(tmp_path / "run")
    out = train(load_config([f"--env={NAN}", "--env_kwargs.nan_prob=0.002", *SMALL,
                             "--total_env_steps=3840", "--checkpoint_interval_s=0.001",
                             f"--logdir={logdir}"]))
    assert out["env_steps"] == 3840
    records = _records(logdir)
    skipped = records[-1].get("nonfinite_updates_skipped", 0)  # a run-long counter
    # P(a NaN in an update of 128 steps) = 23%: a few of the 30 (seeded: the same each
    # run). A NaN state kept would poison every later update (all 8 rows' log-probs).
    assert 0 < skipped < 15
    assert records[-1]["nonfinite_segments_dropped"] < 3 * skipped  # ~1 NaN row each
    assert records[-1]["policy_version"] == 30 - skipped
    saved = _saved(logdir)
    assert saved and all(finite for _, finite in saved.values())
    assert max(saved) == 30 - skipped


def test_nan_rewards_with_on_nonfinite_raise_stop_the_run_naming_the_field(tmp_path):
    logdir = str(tmp_path / "run")
    with pytest.raises(ComponentDied, match=r"NaN or Inf in the trajectory of update \d+: "
                                            r"reward in \d+ of 8 rows"):
        train(load_config([f"--env={NAN}", "--env_kwargs.nan_prob=0.002", *SMALL,
                           "--total_env_steps=100000", "--checkpoint_interval_s=0.001",
                           "--on_nonfinite=raise", f"--logdir={logdir}"]))
    assert all(finite for _, finite in _saved(logdir).values())


def test_counts_are_exact_and_each_checkpoint_records_what_its_state_has_seen(tmp_path):
    """2,000 env steps at 128 a step: 16 steps (2,048 env steps, never a whole step
    more), 16 learn calls (the plan), and every checkpoint's ``env_steps`` is its
    version's steps (the pipelined step was counted before saving)."""
    logdir = str(tmp_path / "run")
    out = train(load_config(["--env=jax:tests.jax_cartpole:make", *SMALL,
                             "--total_env_steps=2000", "--checkpoint_interval_s=0.001",
                             "--keep_checkpoints=100", f"--logdir={logdir}"]))
    assert out["env_steps"] == 2048 and out["policy_version"] == 16
    saved = _saved(logdir)
    assert max(saved) == 16 and len(saved) > 1
    for version, (meta, _) in saved.items():
        assert meta["env_steps"] == version * STEP, (version, meta)


def test_a_refused_population_resume_writes_nothing(tmp_path):
    """A 2-member device population resumed with ``--population=3``: refused naming the
    member without a checkpoint, before the folder changes (no event, no member2 folder)."""
    logdir = str(tmp_path / "run")
    args = ["--env=jax:tests.jax_cartpole:make", *SMALL, "--total_env_steps=1024",
            f"--logdir={logdir}"]
    train(load_config(args + ["--population=2"]))
    before = {os.path.relpath(os.path.join(d, f), logdir): os.path.getmtime(os.path.join(d, f))
              for d, _, files in os.walk(logdir) for f in files}
    with pytest.raises(ResumeRefused, match="no checkpoint of member2"):
        train(load_config(args + ["--population=3", "--resume", "--total_env_steps=4096"]))
    after = {os.path.relpath(os.path.join(d, f), logdir): os.path.getmtime(os.path.join(d, f))
             for d, _, files in os.walk(logdir) for f in files}
    assert after == before
    assert not os.path.exists(RunDir(logdir).checkpoint_dir("member2"))


def test_sigint_during_a_long_compiled_call_stops_the_run_with_a_checkpoint(tmp_path):
    """Each compiled step of ``make_slow`` lasts seconds (a host sleep per env step);
    SIGINT sent while one runs ends the run after that call, with the final checkpoint
    and closing line (no hang, no lost state)."""
    logdir = str(tmp_path / "run")
    env = dict(os.environ, JAXSRL_PROGRESS="0", PYTHONPATH=REPO_ROOT)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
         "--env=jax:tests.jax_hostile_envs:make_slow", "--env_kwargs.sleep_s=0.004", *SMALL,
         "--total_env_steps=10000000", f"--logdir={logdir}"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:  # wait (bounded by the test timeout) for the first update
            lines.append(line)
            if "steps " in line and " v     0 " not in line and "fps" in line:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode != 0, output[-2000:]
    final = _records(logdir)[-1]
    assert final.get("final"), output[-2000:]
    saved = _saved(logdir)
    assert max(saved) == final["policy_version"] >= 1
    assert saved[max(saved)][0]["env_steps"] == final["env_steps"] == max(saved) * STEP
