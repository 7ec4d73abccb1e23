"""Learner interruption: SIGKILL + --resume, bitwise-identical split training, and
checkpoints that a kill mid-write cannot make unreadable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import psutil

from agents import get_agent
from jaxsrl.core.agent import EnvSpec, Trajectory
from jaxsrl.experiment import events
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config
from jaxsrl.envs import env_spaces
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train
from test_faults_helpers import REPO_ROOT, records, small_args, wait_for

TMP_SUFFIX = ".orbax-checkpoint-tmp"


def _finalised_steps(directory: str) -> list:
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


def _meta(directory: str, step: int) -> dict:
    with open(os.path.join(directory, str(step), "meta", "metadata")) as f:
        return json.load(f)


def test_sigkill_then_resume_continues_from_the_newest_checkpoint(tmp_path):
    logdir = str(tmp_path / "run")
    ckdir = os.path.join(logdir, "checkpoints", "default")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
         *small_args(logdir, "--total_env_steps=100000000", "--checkpoint_interval_s=0.3")],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(s >= 3 for s in _finalised_steps(ckdir)) or proc.poll() is not None,
                 120, "a periodic checkpoint")
        assert proc.poll() is None
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children
        proc.kill()  # SIGKILL: no cleanup, no final checkpoint
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    # The actors die with the launcher (PR_SET_PDEATHSIG): nothing is left behind.
    wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                             for p in children), 10, "the actors to die with the launcher")

    step = max(_finalised_steps(ckdir))
    meta = _meta(ckdir, step)
    assert meta["policy_version"] == step
    n_before = len(records(logdir))
    cfg = load_config(small_args(logdir, "--resume", f"--total_env_steps={meta['env_steps'] + 3000}"))
    record = train(cfg)
    starts = RunDir(logdir).read_events("run_start")
    assert [e["resume"] for e in starts] == [False, True]  # the killed run, then this one
    (resumed_event,) = RunDir(logdir).read_events("resumed")
    assert resumed_event == resumed_event | {"policy": "default", "version": step,
                                             "env_steps": meta["env_steps"]}
    resumed = records(logdir)[n_before:]
    assert resumed and all(r["policy_version"] >= step for r in resumed)
    assert record["policy_version"] > step  # it went on from there
    assert record["env_steps"] >= meta["env_steps"] + 3000


# -- learner-only: N updates == N/2, save, restore, N/2 (bitwise on CPU) ----------------
B, T = 4, 8


def _trajectory(seed: int) -> Trajectory:
    r = np.random.default_rng(seed)
    done = r.random((B, T)) < 0.1
    return Trajectory(
        obs=r.standard_normal((B, T + 1, 4)).astype(np.float32),
        action=r.integers(0, 2, (B, T)).astype(np.int32),
        reward=r.standard_normal((B, T)).astype(np.float32),
        terminated=done, truncated=np.zeros((B, T), bool),
        final_obs=np.zeros((B, T, 4), np.float32),
        behaviour_logp=np.full((B, T), np.log(0.5), np.float32),
        policy_version=np.zeros((B, T), np.int32))


def test_split_training_with_checkpoint_is_bitwise_identical(tmp_path):
    # The launcher's persistent XLA cache (as in a run): later test runs skip the compile.
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(load_config([]).compilation_cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    agent = get_agent("ppo")
    config = agent.config_cls(hidden_sizes=(16, 16), num_minibatches=2, num_epochs=2)
    N = 6
    fns = agent.make(config, EnvSpec(*env_spaces("CartPole-v1")), N)
    learn = jax.jit(fns.learn)
    batches = [_trajectory(i) for i in range(N)]

    def run(state, rng, updates):
        for i in updates:
            rng, key = jax.random.split(rng)
            state, _ = learn(state, batches[i], key)
        return state, rng

    state0, rng0 = fns.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1)
    full_state, full_rng = run(state0, rng0, range(N))

    half_state, half_rng = run(state0, rng0, range(N // 2))
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    ckpt.save(N // 2, {"agent": half_state, "rng": half_rng}, {"policy_version": N // 2})
    ckpt.close()
    like = {"agent": fns.init(jax.random.PRNGKey(99)), "rng": jax.random.PRNGKey(98)}
    restored, meta = Checkpointer(str(tmp_path / "ckpt")).restore(like)
    assert meta["policy_version"] == N // 2
    split_state, split_rng = run(restored["agent"], restored["rng"], range(N // 2, N))

    full, split = jax.tree.leaves((full_state, full_rng)), jax.tree.leaves((split_state, split_rng))
    assert len(full) == len(split)
    for a, b in zip(full, split):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # bitwise, not allclose
    assert int(split_state.update_step) == N


# -- checkpoint writes interrupted ----------------------------------------------------
def _tree(value: float, n: int = 8) -> dict:
    return {"w": np.full(n, value, np.float32), "step": np.array(value, np.int32)}


def test_partial_checkpoint_folder_is_ignored(tmp_path):
    directory = str(tmp_path / "ckpt")
    ckpt = Checkpointer(directory)
    for step in (1, 2):
        ckpt.save(step, _tree(step), {"policy_version": step})
    ckpt.close()
    # What a kill in the middle of writing step 3 leaves behind (Orbax's temporary folder).
    partial = os.path.join(directory, "3" + TMP_SUFFIX)
    shutil.copytree(os.path.join(directory, "2"), partial)
    os.remove(os.path.join(partial, "_CHECKPOINT_METADATA"))
    with open(os.path.join(partial, "state", "manifest.ocdbt"), "wb") as f:
        f.write(b"\0" * 7)  # half-written
    ckpt = Checkpointer(directory)
    assert ckpt.latest_step() == 2
    state, meta = ckpt.restore(_tree(0))
    assert meta["policy_version"] == 2 and float(state["w"][0]) == 2.0
    ckpt.save(3, _tree(3), {"policy_version": 3})  # the run can go on checkpointing step 3
    ckpt.close()
    state, meta = Checkpointer(directory).restore(_tree(0))
    assert meta["policy_version"] == 3 and float(state["w"][0]) == 3.0


def test_unreadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    directory = str(tmp_path / "ckpt")
    ckpt = Checkpointer(directory)
    for step in (1, 2):
        ckpt.save(step, _tree(step), {"policy_version": step})
    ckpt.close()
    shutil.rmtree(os.path.join(directory, "2", "state"))  # damaged after it was finalised
    with events.recording(str(tmp_path / "events.jsonl")):
        state, meta = Checkpointer(directory).restore(_tree(0))
    assert meta["policy_version"] == 1 and float(state["w"][0]) == 1.0
    (unreadable,) = events.read_events(str(tmp_path / "events.jsonl"), "checkpoint_unreadable")
    assert unreadable["step"] == 2 and unreadable["directory"] == directory


KILL_DURING_SAVE = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {repo!r})
    from jaxsrl.experiment.checkpoint import Checkpointer
    ckpt = Checkpointer({directory!r})
    ckpt.save(1, {{"w": np.full(8, 1.0, np.float32), "step": np.array(1, np.int32)}}, {{"policy_version": 1}})
    ckpt.manager.wait_until_finished()
    big = {{"w": np.full({n}, 2.0, np.float32), "step": np.array(2, np.int32)}}
    print("saving", flush=True)
    ckpt.save(2, big, {{"policy_version": 2}})
    ckpt.manager.wait_until_finished()
    print("saved", flush=True)
""")


def test_kill_during_a_checkpoint_write_leaves_the_previous_one_readable(tmp_path):
    directory = str(tmp_path / "ckpt")
    n = 25_000_000  # 100 MB: a write that takes a while
    proc = subprocess.Popen([sys.executable, "-c", KILL_DURING_SAVE.format(
        repo=REPO_ROOT, directory=directory, n=n)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saving"
        wait_for(lambda: any(TMP_SUFFIX in name for name in os.listdir(directory)), 30,
                 "the temporary folder of step 2", interval_s=0.005)
        time.sleep(0.2)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    ckpt = Checkpointer(directory)
    if 2 not in _finalised_steps(directory):  # killed mid-write (the usual case)
        assert ckpt.latest_step() == 1
        state, meta = ckpt.restore(_tree(0))
        assert meta["policy_version"] == 1 and float(state["w"][0]) == 1.0
    else:  # the write finished before the kill: then it must be whole
        state, meta = ckpt.restore(_tree(0, n))
        assert meta["policy_version"] == 2 and float(state["w"][-1]) == 2.0
    ckpt.close()
