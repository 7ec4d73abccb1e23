"""--launcher=ray on a one-node Ray cluster started by the tests (on loopback).

The cluster is ``ray start --head --block`` in its own session (a module fixture),
stopped by SIGTERM at the end; drivers join it with ``--ray_address``. Ray keeps it on
127.0.0.1 through ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (see ``jaxsrl/launch/ray_placement.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

ray = pytest.importorskip("ray")

from jaxsrl.experiment.config import load_config  # noqa: E402
from jaxsrl.launch.ray_placement import LOOPBACK_ENV, RaySpawner, connect  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO_ROOT, "scripts", "train.py")
SMALL = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=8", "--segment_length=16",
         "--batch_segments=8", "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _env() -> dict:
    # No token authentication on this throwaway loopback cluster (Ray enables it when
    # ~/.ray/auth_token exists, and then every driver needs RAY_AUTH_MODE=token).
    return {**os.environ, LOOPBACK_ENV: "0", "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0", "JAXSRL_PROGRESS": "0"}


@pytest.fixture(scope="module")
def cluster():
    """Address of a one-node Ray cluster (4 logical CPUs) on 127.0.0.1."""
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    log_path = os.path.join(temp_dir, "head.log")
    with open(log_path, "w") as log:
        head = subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
             f"--port={port}", "--num-cpus=4", "--num-gpus=0", "--include-dashboard=false",
             f"--temp-dir={temp_dir}", "--disable-usage-stats"],
            env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def started():
        with open(log_path) as f:
            return "Ray runtime started" in f.read() or head.poll() is not None

    try:
        _wait_for(started, 120, "the Ray head node")
        if head.poll() is not None:
            with open(log_path) as f:
                raise AssertionError(f"ray start --head failed:\n{f.read()[-3000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        members = psutil.Process(head.pid).children(recursive=True) if head.poll() is None else []
        head.terminate()  # ray start --block stops the node's processes on SIGTERM
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
        for p in members:  # anything it left behind
            if p.is_running():
                p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _actors_of(logdir: str) -> list[psutil.Process]:
    """Running actor processes of the run writing to ``logdir``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "jaxsrl.workers.actor" in cmd and any(logdir in part for part in cmd):
            found.append(p)
    return found


def _records(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def _version(logdir: str) -> int:
    return max([r.get("policy_version", 0) for r in _records(logdir)] or [0])


def test_config_checks_of_ray_fields():
    cfg = load_config(["--launcher=ray", "--ray_address=head-node:6379", "--actor_cpus=0.5",
                       "--learner_gpus=1"])
    assert (cfg.launcher, cfg.ray_address, cfg.actor_cpus, cfg.learner_gpus) == (
        "ray", "head-node:6379", 0.5, 1.0)
    assert load_config([]).launcher == "local"
    with pytest.raises(ValueError, match="--ray_address=x:1 needs --launcher=ray"):
        load_config(["--ray_address=x:1"])
    with pytest.raises(ValueError, match="actor_cpus=-1.0 must be >= 0"):
        load_config(["--launcher=ray", "--actor_cpus=-1"])
    with pytest.raises(ValueError, match="launcher='slurm'"):
        dataclasses.replace(load_config([]), launcher="slurm").validate()


def test_launcher_ray_without_ray_installed_is_a_one_line_error(tmp_path):
    (tmp_path / "ray.py").write_text("raise ImportError('No module named ray')\n")  # shadows Ray
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(tmp_path), REPO_ROOT])}  # ray.py first
    out = subprocess.run([sys.executable, TRAIN, "--launcher=ray"], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert "--launcher=ray needs Ray: pip install -e '.[ray]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_unreachable_ray_address_is_a_quick_clear_error():
    import socket

    from jaxsrl.launch.ray_placement import check_reachable
    with socket.socket() as sock:  # a free port nobody listens at
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ValueError, match=f"--ray_address=127.0.0.1:{port}: no Ray head answers"):
        check_reachable(f"127.0.0.1:{port}", timeout_s=2.0)
    with pytest.raises(ValueError, match="HOST:PORT"):
        check_reachable("head-node")
    check_reachable("")  # a one-node cluster started here
    check_reachable("auto")


def test_ray_process_handle_behaves_like_popen(cluster, monkeypatch):
    for key, value in _env().items():
        monkeypatch.setenv(key, value)
    cfg = load_config(["--launcher=ray", f"--ray_address={cluster}"])
    assert connect(cfg)
    try:
        spawn = RaySpawner()
        code = "import os, sys, time; time.sleep(float(os.environ['NAP'])); sys.exit(3)"
        proc = spawn([sys.executable, "-c", code], {"NAP": "60"})
        child = psutil.Process(proc.pid)
        assert "ProcessHost" in " ".join(child.parent().cmdline())  # placed by Ray
        assert proc.poll() is None and proc.returncode is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.2)
        proc.terminate()
        assert proc.wait(30) == -signal.SIGTERM == proc.poll()
        _wait_for(lambda: not child.is_running(), 10, "the child to go")

        quick = spawn([sys.executable, "-c", code], {"NAP": "0"})
        assert quick.wait(60) == 3  # the exit status, with the environment handed over

        stuck = spawn([sys.executable, "-c", code], {"NAP": "60"})
        host = psutil.Process(stuck.pid).parent()
        stuck.kill()
        assert stuck.wait(30) == -signal.SIGKILL
        _wait_for(lambda: not host.is_running(), 30, "the host of an exited process to go")

        # A child dies with its host (as jaxsrl's workers do with spec["parent_pid"],
        # which the host rewrites to its own pid), and a dead host reads as SIGKILL.
        orphan_code = ("import ctypes, json, os, signal, sys, time; "
                       "spec = json.loads(sys.argv[1]); assert os.getppid() == spec['parent_pid']; "
                       "ctypes.CDLL('libc.so.6').prctl(1, signal.SIGKILL); time.sleep(60)")
        orphan = spawn([sys.executable, "-c", orphan_code, json.dumps({"parent_pid": os.getpid()})],
                       {})
        child = psutil.Process(orphan.pid)
        with pytest.raises(subprocess.TimeoutExpired):
            orphan.wait(3)  # alive: it passed its parent_pid check
        child.parent().kill()  # the host process dies (as on a lost node)
        assert orphan.wait(60) == -signal.SIGKILL
        _wait_for(lambda: not child.is_running() or child.status() == "zombie", 30,
                  "the child to die with its host")
    finally:
        ray.shutdown()


def test_actors_run_as_ray_actors_are_restarted_and_stop_with_the_run(cluster, tmp_path):
    logdir = str(tmp_path / "run")
    driver = subprocess.Popen(
        [sys.executable, TRAIN, *SMALL, "--launcher=ray", f"--ray_address={cluster}",
         "--total_env_steps=100000000", f"--logdir={logdir}"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, psutil.Process] = {}  # actor pid -> its host process
    try:
        actors = _wait_for(lambda: len(_actors_of(logdir)) == 2 and _actors_of(logdir), 120,
                           "two actor processes")
        launched = {p.pid for p in psutil.Process(driver.pid).children(recursive=True)}
        for p in actors:
            assert p.pid not in launched  # not started by the driver's process
            assert "ProcessHost" in " ".join(p.parent().cmdline())  # but of a Ray actor
            seen[p.pid] = p.parent()
        _wait_for(lambda: _version(logdir) >= 2, 120, "the learner to update")
        victim = actors[0]
        victim_id = json.loads(victim.cmdline()[-1])["actor_id"]
        victim.kill()
        new = _wait_for(lambda: [p for p in _actors_of(logdir) if p.pid not in seen
                                 and json.loads(p.cmdline()[-1])["actor_id"] == victim_id],
                        120, "the restarted actor")[0]
        seen[new.pid] = new.parent()
        assert "ProcessHost" in " ".join(new.parent().cmdline())
        at_restart = _version(logdir)
        _wait_for(lambda: _version(logdir) >= at_restart + 3, 120, "updates after the restart")
        driver.send_signal(signal.SIGTERM)  # a clean stop, as for a local run
        out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 130, out[-3000:]
    closing = _records(logdir)[-1]
    assert closing["final"] and closing["actor_restarts"] >= 1, closing
    assert closing["env_steps"] > 0 and closing["policy_version"] >= at_restart + 3
    assert os.listdir(os.path.join(logdir, "checkpoints", "default"))  # the final checkpoint
    # Nothing outlives the run: no actor process, no process host.
    everything = list(seen) + [h.pid for h in seen.values()]
    _wait_for(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                              for pid in everything), 30, "the run's processes to go")


@pytest.mark.slow
def test_ray_launcher_trains_cartpole_to_475(cluster, tmp_path):
    logdir = str(tmp_path / "run")
    out = subprocess.run(
        [sys.executable, TRAIN, "--env=CartPole-v1", "--target_return=475", "--launcher=ray",
         f"--ray_address={cluster}", f"--logdir={logdir}"],
        env=_env(), capture_output=True, text=True, timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    returns = [r["episode_return_mean"] for r in _records(logdir) if "episode_return_mean" in r]
    assert max(returns) >= 475
