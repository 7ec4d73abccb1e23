"""Server faults: a dead inference server or learner stops the run naming it; actors
never hang on a dead server; SIGTERM stops a training process promptly, with a
checkpoint and no process left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import zmq

from fake_inference import FakeInferenceServer
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import ComponentDied, train
from jaxsrl.core import exit_codes
from jaxsrl.workers.actor import worker as actor_mod
from jaxsrl.workers.inference.policy import PolicyWorker
from jaxsrl.workers.learner.trainer import TrainerWorker
from test_faults_helpers import (FLAKY_ENV, REPO_ROOT, flaky_env_path, records,  # noqa: F401
                                 small_args, wait_for)


def _fail_after(method, calls: int):
    count = {"n": 0}

    def wrapper(self, *args, **kwargs):
        count["n"] += 1
        if count["n"] > calls:
            raise RuntimeError("injected failure")
        return method(self, *args, **kwargs)
    return wrapper


@pytest.mark.parametrize("cls, method, name", [
    (PolicyWorker, "infer", "policy"),
    (TrainerWorker, "update", "trainer"),
])
def test_dead_server_stops_the_run_naming_it(tmp_path, monkeypatch, cls, method, name):
    monkeypatch.setattr(cls, method, _fail_after(getattr(cls, method), 20))
    cfg = load_config(small_args(str(tmp_path / "run"), "--total_env_steps=100000000"))
    t0 = time.monotonic()
    with pytest.raises(ComponentDied, match=rf"^{name} died: RuntimeError\('injected failure'\)"):
        train(cfg)
    assert time.monotonic() - t0 < 60
    assert psutil.Process().children(recursive=True) == []  # no orphan actor


def _free_address() -> str:
    sock = zmq.Context.instance().socket(zmq.PULL)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(0)
    return f"tcp://127.0.0.1:{port}"


def _actor_spec(inference: str, samples: str, **extra) -> dict:
    return {"actor_id": 0, "run_id": 1, "env": "CartPole-v1", "env_kwargs": {},
            "envs_per_group": 2, "ring_size": 1, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": inference,
                         "sample_address": samples}],
            "carry_spec": [], "timeout_s": 1.0, **extra}


def _run_actor(spec: dict) -> tuple[int, float, str]:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "jaxsrl.workers.actor", json.dumps(spec)],
                          env=env, capture_output=True, text=True, timeout=60)
    return proc.returncode, time.monotonic() - t0, proc.stderr


FakeServer = FakeInferenceServer


@pytest.mark.parametrize("limit, message", [
    (0, "did not answer within 1.5 s"),  # silent from the start (startup_timeout_s)
    (10, "did not answer within 1.0 s"),  # answers, then goes silent (timeout_s)
])
def test_actor_exits_when_its_inference_server_goes_silent(limit, message):
    server = FakeServer(limit)
    try:
        samples = zmq.Context.instance().socket(zmq.PULL)  # takes every segment
        samples_address = f"tcp://127.0.0.1:{samples.bind_to_random_port('tcp://127.0.0.1')}"
        code, took, err = _run_actor(_actor_spec(server.address, samples_address,
                                                 startup_timeout_s=1.5))
        samples.close(0)
    finally:
        server.close()
    assert code == exit_codes.EXIT_SERVER_TIMEOUT, err
    assert message in err
    assert took < 30


def test_actor_exits_when_its_learner_takes_no_samples():
    """An answering inference server, and a sample address nobody reads."""
    server = FakeServer()
    try:
        code, took, err = _run_actor(_actor_spec(server.address, _free_address(),
                                                 sample_timeout_s=2.0, ping_interval_s=0.5))
    finally:
        server.close()
    assert code == exit_codes.EXIT_LEARNER_TIMEOUT, err
    assert "did not take a segment in time" in err
    assert took < 30
    # While blocked on its learner the actor told the server it is alive.
    assert len(server.pings) >= 2 and server.pings[0] == {"actor": 0, "run": 1}


def _descendants(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list) -> list:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_train_py_promptly_with_a_checkpoint_and_no_orphans(tmp_path, sig):
    logdir = str(tmp_path / "run")
    args = [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
            *small_args(logdir, "--total_env_steps=100000000")]
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_for(lambda: any(r["policy_version"] >= 2 for r in records(logdir)) or proc.poll() is not None,
                 120, "training to start")
        assert proc.poll() is None, proc.stdout.read()
        children = wait_for(lambda: _descendants(proc.pid), 30, "actor processes")
        t0 = time.monotonic()
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output  # scripts/train.py: interrupted, checkpoint saved
    assert took < 20, f"took {took:.1f} s to stop"
    assert "interrupted" in output and "checkpoint of default at version" in output
    ckpt = Checkpointer(os.path.join(logdir, "checkpoints", "default"))
    assert ckpt.latest_step() is not None and ckpt.latest_step() >= 2
    ckpt.close()
    time.sleep(0.5)
    assert _alive(children) == [], [p.cmdline() for p in _alive(children)]


def test_train_py_exits_non_zero_naming_the_dead_component(tmp_path, flaky_env_path):
    """The whole chain in a real process: the learner dies (NaN rewards with
    --on_nonfinite=raise) -> exit code 1, a message naming it, no process left."""
    toml = tmp_path / "flaky.toml"
    toml.write_text("[env_kwargs]\nfail_in = \"\"\nnan_reward_after = 50\n")
    args = [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
            *small_args(str(tmp_path / "run"), f"--env={FLAKY_ENV}", f"--config={toml}",
                        "--on_nonfinite=raise", "--total_env_steps=100000000")]
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    children = set()
    try:
        while proc.poll() is None:
            children |= set(_descendants(proc.pid))
            time.sleep(0.05)
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, output
    assert re.search(r"run stopped: trainer died: NonFiniteError\(.*NaN or Inf in \['reward'\]", output)
    assert children and _alive(list(children)) == []
