"""Multi-process (multi-host) learner on one machine: JAX processes joined by
``jax.distributed`` with Gloo CPU collectives (see ``jaxsrl/parallel/distributed.py`` and
``jaxsrl/workers/learner/process.py``).

The processes are started by the tests (JAX's device list is fixed at start-up, and a
process can join one group only), each with a free localhost port for the coordinator.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import psutil
import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.workers.learner.process import MetricsRelay, free_port, replay

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(devices_per_process: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices_per_process}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


# Run by each of 2 processes (2 fake CPU devices each): argv = process id, port, folder.
LEARN_SNIPPET = r"""
import os, sys, threading
pid, port, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
from jaxsrl.parallel import devices
from jaxsrl.parallel import distributed
distributed.initialize(f"127.0.0.1:{port}", 2, pid, timeout_s=120)
import gymnasium, jax, numpy as np
from agents import ppo
from jaxsrl.core.agent import EnvSpec, Trajectory

assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
B, T = 8, 8  # global batch: rows 0..3 live on process 0, rows 4..7 on process 1
spec = EnvSpec(gymnasium.spaces.Box(-1.0, 1.0, (3,)), gymnasium.spaces.Discrete(3))
fns = ppo.make(ppo.PPOConfig(hidden_sizes=(16,), num_epochs=2, num_minibatches=4), spec, 10)
r = np.random.default_rng(0)
terminated, truncated = np.zeros((B, T), bool), np.zeros((B, T), bool)
terminated[0, 2] = truncated[5, 5] = True
traj = Trajectory(
    obs=r.normal(size=(B, T + 1, 3)).astype(np.float32),
    action=r.integers(0, 3, (B, T)).astype(np.int32),
    reward=r.normal(size=(B, T)).astype(np.float32), terminated=terminated, truncated=truncated,
    final_obs=r.normal(size=(B, T, 3)).astype(np.float32),
    behaviour_logp=np.full((B, T), np.log(1 / 3), np.float32),
    policy_version=np.zeros((B, T), np.int32))
rng = jax.random.PRNGKey(1)

# Each process starts from its own parameters; process 0's reach everyone.
mine = jax.jit(fns.init)(jax.random.PRNGKey(100 + pid))
distributed.barrier("start", 60)
start = distributed.broadcast_from_first(mine)
mesh = distributed.global_mesh()
state = distributed.put_replicated_global(start, mesh)
assert all(x.sharding.is_fully_replicated and not x.is_fully_addressable
           for x in jax.tree.leaves(state))
learn = devices.jit_learn(fns.learn, mesh)
stop = threading.Event()
gate = distributed.Lockstep("test", timeout_s=60, payload=lambda: f"rows of {pid}",
                            on_payload=lambda p, s: print(f"PAYLOAD {p} {s}", flush=True))
rows = jax.tree.map(lambda x: x[pid * B // 2:(pid + 1) * B // 2], traj)
for _ in range(2):
    assert gate(stop)
    state, metrics = learn(state, distributed.put_batch_global(rows, mesh), rng)
got = distributed.host_copy(state)

# The same two updates on one device over the full batch.
one = jax.tree.map(jax.numpy.asarray, start)
for _ in range(2):
    one, one_metrics = jax.jit(fns.learn)(one, traj, rng)
moved = max(float(np.abs(np.asarray(a) - b).max()) for a, b in
            zip(jax.tree.leaves(one.params), jax.tree.leaves(start.params)))
assert moved > 1e-3, moved  # the updates did something
for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(a), b, atol=1e-5, rtol=1e-5)
for k in one_metrics:
    np.testing.assert_allclose(one_metrics[k], jax.device_get(metrics[k]), atol=1e-5, rtol=1e-4,
                               err_msg=k)

# Process-local inference on this process's part of the replicated parameters.
local = devices.local_mesh()
params = distributed.local_view(state.params, local)
act = distributed.jit_act_local(fns.act, local, deterministic=True)
action, _, _ = act(params, np.ones((4, 3), np.float32), None, jax.random.PRNGKey(0))
expected, _, _ = jax.jit(lambda p, o: fns.act(p, o, None, rng, deterministic=True))(
    one.params, np.ones((4, 3), np.float32))
np.testing.assert_array_equal(np.asarray(action), np.asarray(expected))

if pid == 0:  # checkpoints: process 0 alone writes and reads them
    ckpt = distributed.PrimaryCheckpointer(folder)
    ckpt.save(2, {"agent": state, "rng": rng}, {"policy_version": 2})
    ckpt.close()
    ckpt = distributed.PrimaryCheckpointer(folder)
    tree, meta = ckpt.restore({"agent": state, "rng": rng})
    ckpt.close()
    assert meta["policy_version"] == 2
    for a, b in zip(jax.tree.leaves(tree["agent"]), jax.tree.leaves(got)):
        np.testing.assert_array_equal(a, b)
    stop.set()  # process 0 stops: process 1 learns so at its next gate
    assert not gate(stop)
    print("LEAD_STOPPED", flush=True)
else:
    assert not gate(stop)
    print("FOLLOWER_STOPPED", flush=True)
    print("MULTIHOST_OK 1", flush=True)
    distributed.put_json("done/1", True)
    os._exit(0)  # as learner processes do: never leave after process 0 (that aborts)
distributed.get_json("done/1", 60)  # end the group only after process 1 is done
print("MULTIHOST_OK 0", flush=True)
"""


def test_two_processes_learn_like_one_device(tmp_path):
    """One update of 2 processes x 2 devices, each holding half the batch, equals the
    single-device update on the whole batch; process 0 checkpoints it alone."""
    port = free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-c", LEARN_SNIPPET, str(pid), str(port), str(tmp_path / "ckpt")],
        env=_env(2), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for pid in (0, 1)]
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=240)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    report = "\n".join(outs)
    assert all(p.returncode == 0 for p in procs), report[-6000:]
    assert "MULTIHOST_OK 0" in outs[0] and "MULTIHOST_OK 1" in outs[1], report[-6000:]
    assert outs[0].count("PAYLOAD 1 rows of 1") == 2  # process 1's payload at each gate
    assert "LEAD_STOPPED" in outs[0] and "FOLLOWER_STOPPED" in outs[1]


def _descendants_of(pid: int) -> list:
    """Processes still alive that were started for the run of launcher ``pid``."""
    marker = f'"parent_pid": {pid}'
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            pass
    return found


SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16",
         "--num_learner_processes=2"]


def test_cartpole_with_two_learner_processes(tmp_path):
    """A short run whose learner spans 2 processes: both learn to the end in lockstep,
    process 0 counts every actor's steps and writes a checkpoint that restores."""
    import jax  # noqa: PLC0415

    from agents import get_agent  # noqa: PLC0415
    from jaxsrl.core.agent import EnvSpec  # noqa: PLC0415
    from jaxsrl.experiment.checkpoint import Checkpointer  # noqa: PLC0415
    from jaxsrl.envs import env_spaces  # noqa: PLC0415

    logdir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "scripts", "train.py"), *SMALL,
         "--total_env_steps=4000", f"--logdir={logdir}"],
        env=_env(1), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = proc.communicate(timeout=240)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-6000:]
    assert not _descendants_of(proc.pid)  # actors and learner process 1 exited

    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    final = records[-1]
    assert final["final"] and final["env_steps"] >= 4000
    assert final["policy_version"] >= 2
    # Process 1 learned every update with process 0, up to the last one.
    assert re.search(r"\[learner 1\] learning on tcp://127\.0\.0\.1:\d+ with 1 of 2 devices; "
                     r"4 segments per update", out), out[-6000:]
    assert f"[learner 1] stopped at policy version {final['policy_version']}" in out, out[-6000:]
    assert any("episode_return_mean" in r for r in records)

    # The checkpoint (host arrays written by process 0) restores in a plain process.
    cfg = load_config(SMALL + [f"--logdir={logdir}"])
    fns = get_agent("ppo").make(cfg.agent_config(), EnvSpec(*env_spaces("CartPole-v1")),
                                cfg.num_updates())
    like = {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)}
    ckpt = Checkpointer(os.path.join(logdir, "checkpoints", "default"))
    tree, meta = ckpt.restore(like)
    ckpt.close()
    assert meta["policy_version"] == final["policy_version"]
    assert meta["env_steps"] == final["env_steps"]
    assert any(float(np.abs(np.asarray(a) - np.asarray(b)).max()) > 1e-3 for a, b in
               zip(jax.tree.leaves(tree["agent"].params), jax.tree.leaves(like["agent"].params)))


def _last_version(logdir: str) -> int:
    try:
        with open(os.path.join(logdir, "metrics.jsonl")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    return json.loads(lines[-1]).get("policy_version", 0) if lines else 0


@pytest.mark.slow
def test_a_killed_learner_process_stops_the_run_with_a_checkpoint_then_resume(tmp_path):
    """SIGKILL learner process 1 mid-run: the launcher stops (exit 1) naming it, saves
    the last complete update, leaves no process behind; --resume continues from there."""
    import time  # noqa: PLC0415

    logdir = str(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "scripts", "train.py"), *SMALL,
         "--total_env_steps=100000000", f"--logdir={logdir}"],
        env=_env(1), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while _last_version(logdir) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None and _last_version(logdir) >= 5
        learner = [p for p in _descendants_of(proc.pid)
                   if "jaxsrl.workers.learner" in p.cmdline()]
        assert len(learner) == 1
        learner[0].kill()
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-6000:]
    assert re.search(r"run stopped: .*learner\[1\] \(pid \d+\) exited: killed by SIGKILL", out), out[-6000:]
    assert not _descendants_of(proc.pid)
    ckdir = os.path.join(logdir, "checkpoints", "default")
    saved = max(int(n) for n in os.listdir(ckdir) if n.isdigit())
    assert saved >= 5
    with open(os.path.join(ckdir, str(saved), "meta", "metadata")) as f:
        steps = json.load(f)["env_steps"]

    resumed = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "train.py"), *SMALL, "--resume",
         f"--total_env_steps={steps + 2000}", f"--logdir={logdir}"],
        env=_env(1), cwd=REPO, capture_output=True, text=True, timeout=240)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-6000:]
    assert f"resumed default from version {saved}, {steps} env steps" in out
    final = _last_version(logdir)
    assert final > saved and f"[learner 1] stopped at policy version {final}" in out


def test_metrics_relay_adds_a_learner_process_metrics_to_process_0():
    relay = MetricsRelay()
    relay.add_env_steps(64)
    relay.add_episode({"return": 10.0, "length": 10}, suffix="")
    relay.add_means({"wait_s": 0.5}, prefix="actor/")
    relay.count("dropped_segments", 2)
    lead = MetricsAccumulator()
    lead.add_env_steps(100)
    lead.add_episode({"return": 20.0, "length": 20})
    replay(lead, relay.drain())
    replay(lead, relay.drain())  # drained: nothing twice
    snap = lead.snapshot(1.0)
    assert snap["env_steps"] == 164
    assert snap["episode_return_mean"] == 15.0 and snap["episodes"] == 2
    assert snap["actor/wait_s"] == 0.5 and snap["dropped_segments"] == 2
    assert relay.snapshot(1.0)["env_steps"] == 64  # the process's own view is kept too
    replay(lead, json.dumps([["snapshot", [1.0]], ["count", ["x", 1]]]))  # only relayed calls
    assert lead.snapshot(1.0)["x"] == 1


@pytest.mark.parametrize("args, message", [
    (["--num_learner_processes=0"], "num_learner_processes=0 must be a positive integer"),
    (["--num_learner_processes=3"], "batch_segments=64 must be divisible by num_learner_processes=3"),
    (["--num_learner_processes=2", "--num_actors=1"], "needs at least 2 actors"),
    (["--num_learner_processes=2", "--coordinator_address=10.0.0.1"], "must be host:port"),
])
def test_impossible_multi_process_configs_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        load_config(args)
