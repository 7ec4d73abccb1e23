"""Serial mode (``--launcher=serial``): the same actor, policy worker and trainer in this
one OS process, actors as threads, streams over ``inproc://``. Serial twins of the
actor fault tests (crashed, failing, hung and timed-out actors; a dead trainer; a stop
signal) check that the launcher's supervision keeps its meaning there."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading

import gymnasium
import psutil
import pytest
import zmq
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from jaxsrl.core import exit_codes
from jaxsrl.core.child import read_error
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import ComponentDied, train
from jaxsrl.launch.processes import ChildProcess
from jaxsrl.launch.serial import ThreadSpawner
from jaxsrl.streams import sockets
from jaxsrl.workers.learner.trainer import TrainerWorker
from fake_inference import FakeInferenceServer
from test_end_to_end import SMALL, TWO_POLICIES, TWO_SERVERS_ONE_LEARNER
from test_faults_helpers import FLAKY_ENV, REPO_ROOT, records, small_args, wait_for

SERIAL = "--launcher=serial"
HANGING_ENV = "HangingCartPole-v0"


class ChildWatch:
    """Records every child process of this process that appears while in the block."""

    def __init__(self):
        self.before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.new: set = set()
        self.actor_threads: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(0.05):
            self.new |= {p.pid for p in psutil.Process().children(recursive=True)} - self.before
            self.actor_threads |= {t.name for t in threading.enumerate() if t.name.startswith("actor ")}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)


def _live_actor_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("actor ") and t.is_alive()]


def test_serial_cartpole_learns_in_one_process(tmp_path):
    """CartPole's own config (2 actors x 32 envs), serial: a modest return within a
    generous budget, no child process at any time, actors as threads of this one."""
    cfg = load_config([SERIAL, "--env=CartPole-v1", f"--logdir={tmp_path / 'run'}",
                       "--total_env_steps=400000", "--target_return=150", "--log_interval_s=1"])
    with ChildWatch() as watch:
        record = train(cfg)
    assert record["episode_return_mean"] >= 150, record
    assert watch.new == set()
    assert watch.actor_threads == {"actor 0", "actor 1"}
    assert wait_for(lambda: not _live_actor_threads(), 30, "the actor threads to end")


@pytest.mark.parametrize("graph, policies, actors", [(TWO_POLICIES, ["a", "b"], 2),
                                                     (TWO_SERVERS_ONE_LEARNER, ["shared"], 3)])
def test_non_trivial_dataflow_graphs_run_serially(tmp_path, graph, policies, actors):
    """Several trainers and servers in one process: each binds its own inproc endpoint."""
    toml = tmp_path / "graph.toml"
    toml.write_text(graph)
    logdir = str(tmp_path / "run")
    cfg = load_config(SMALL + [SERIAL, f"--config={toml}", "--total_env_steps=10000",
                               f"--logdir={logdir}"])
    with ChildWatch() as watch:
        record = train(cfg)
    assert record["env_steps"] >= 10000
    for policy in policies:
        assert os.listdir(os.path.join(logdir, "checkpoints", policy))
    if len(policies) > 1:
        assert all(record[f"policy_version/{p}"] >= 1 for p in policies)
    assert watch.new == set() and watch.actor_threads == {f"actor {i}" for i in range(actors)}
    assert wait_for(lambda: not _live_actor_threads(), 30, "the actor threads to end")


# Options that need other processes: rows of the refusal table, walked by
# tests/unit/test_modes.py (and the mode-pair tier, tests/system/test_mode_pairs.py).


def test_serial_mode_takes_no_spawner(tmp_path):
    cfg = load_config(small_args(str(tmp_path / "run"), SERIAL))
    with pytest.raises(ValueError, match="--launcher=serial runs every worker in this process"):
        train(cfg, spawner=lambda argv, env, prefix=(): None)


# -- actor faults, serial twins of tests/system/test_faults_actor.py ------------------------------
def test_environment_error_restarts_the_actor_thread_with_the_traceback(tmp_path):
    logdir = str(tmp_path / "run")
    cfg = load_config(small_args(logdir, SERIAL, "--total_env_steps=4000"))
    cfg = dataclasses.replace(cfg, env=FLAKY_ENV, env_kwargs={
        "fail_in": "step", "fail_after": 40, "once_file": str(tmp_path / "failed")})
    with ChildWatch() as watch:
        record = train(cfg)
    assert record["actor_restarts"] == 1
    assert record["env_steps"] >= 4000
    (restart,) = RunDir(logdir).read_events("actor_restart")
    assert restart["code"] == exit_codes.EXIT_ENV_ERROR
    assert restart["error"].startswith("environment step raised RuntimeError: injected step failure")
    with open(restart["error_file"]) as f:  # the thread's traceback
        assert "Traceback (most recent call last)" in f.read()
    assert watch.new == set()


def test_environment_that_keeps_failing_stops_the_serial_run_with_its_error(tmp_path):
    cfg = load_config(small_args(str(tmp_path / "run"), SERIAL, "--total_env_steps=4000",
                                 "--max_actor_restarts=2"))
    cfg = dataclasses.replace(cfg, env=FLAKY_ENV, env_kwargs={"fail_in": "reset"})
    with pytest.raises(ComponentDied, match=r"environment keeps failing.*max_actor_restarts=2.*"
                                            r"injected reset failure"):
        train(cfg)
    assert wait_for(lambda: not _live_actor_threads(), 30, "the actor threads to end")


_HANG_ONCE = threading.Lock()  # the first env to take it hangs; never released
RELEASE = threading.Event()  # ends the hang


class HangingCartPole(CartPoleEnv):
    """CartPole whose first instance (in this process) to reach step ``hang_after``
    blocks in ``step`` until :data:`RELEASE`: a hung actor thread that cannot see its
    stop event."""

    def __init__(self, hang_after: int = 20, **kwargs):
        super().__init__(**kwargs)
        self.hang_after, self.steps = hang_after, 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.hang_after and _HANG_ONCE.acquire(blocking=False):
            RELEASE.wait(300)
        return super().step(action)


if HANGING_ENV not in gymnasium.registry:
    gymnasium.register(HANGING_ENV, entry_point=HangingCartPole, max_episode_steps=500)


def test_hung_actor_thread_is_abandoned_and_replaced(tmp_path):
    """The serial twin of the SIGSTOP hang: the hung thread is left behind (a thread
    cannot be killed), a new one with a new run id takes its place, learning goes on,
    and the old thread ends once released."""
    logdir = str(tmp_path / "run")
    cfg = load_config(small_args(logdir, SERIAL, f"--env={HANGING_ENV}",
                                 "--total_env_steps=100000000", "--actor_heartbeat_timeout_s=2"))
    out: dict = {}

    def version():
        return max([r["policy_version"] for r in records(logdir)] or [0])

    def go():
        try:
            wait_for(lambda: any(r.get("actor_hangs") for r in records(logdir)), 120, "the hang")
            out["version_at_restart"] = version()
            wait_for(lambda: version() >= out["version_at_restart"] + 5, 120, "more updates")
        except BaseException as exc:  # reported by the test
            out["error"] = exc
        os.kill(os.getpid(), signal.SIGTERM)  # train() stops cleanly

    th = threading.Thread(target=go, daemon=True)
    th.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            train(cfg)
    finally:
        RELEASE.set()
    th.join(10)
    assert "error" not in out, out.get("error")
    last = records(logdir)[-1]
    assert last["actor_hangs"] >= 1 and last["actor_restarts"] >= 1
    run = RunDir(logdir)
    (hang, *_) = run.read_events("actor_hang")
    assert run.read_events("actor_restart")[0] | {"actor_id": hang["actor_id"], "reason": "hung"} \
        == run.read_events("actor_restart")[0]
    assert run.read_events("thread_abandoned")
    assert wait_for(lambda: not _live_actor_threads(), 30, "the released thread to end")


@pytest.mark.parametrize("method", ["update"])
def test_dead_trainer_stops_the_serial_run_naming_it(tmp_path, monkeypatch, method):
    calls = {"n": 0}
    update = getattr(TrainerWorker, method)

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("injected failure")
        return update(self, *args, **kwargs)

    monkeypatch.setattr(TrainerWorker, method, failing)
    cfg = load_config(small_args(str(tmp_path / "run"), SERIAL, "--total_env_steps=100000000"))
    with pytest.raises(ComponentDied, match=r"^trainer died: RuntimeError\('injected failure'\)"):
        train(cfg)
    assert wait_for(lambda: not _live_actor_threads(), 30, "the actor threads to end")


# -- one actor thread against fake servers, twins of tests/workers/test_faults_server.py -----------
def InprocServer(context: zmq.Context, limit: int | None = None) -> FakeInferenceServer:
    """The fake inference server on ``inproc://`` in the test's context."""
    return FakeInferenceServer(limit, context, sockets.INPROC)


def _actor(context: zmq.Context, inference: str, samples: str, **extra) -> ChildProcess:
    spec = {"actor_id": 0, "env": "CartPole-v1", "env_kwargs": {}, "envs_per_group": 2,
            "ring_size": 1, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "p", "team": None, "inference_address": inference,
                         "sample_address": samples}],
            "carry_spec": [], "timeout_s": 1.0, **extra}
    return ChildProcess("actors[0]", spec, spawner=ThreadSpawner(context))


@pytest.fixture
def context():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.mark.parametrize("limit, message", [
    (0, "did not answer within 1.5 s"),  # silent from the start (startup_timeout_s)
    (10, "did not answer within 1.0 s"),  # answers, then goes silent (timeout_s)
])
def test_actor_thread_exits_when_its_inference_server_goes_silent(context, tmp_path, limit, message):
    server = InprocServer(context, limit)
    samples = context.socket(zmq.PULL)  # takes every segment
    actor = _actor(context, server.address, sockets.bind(samples, sockets.INPROC, name="samples"),
                   startup_timeout_s=1.5, error_file=str(tmp_path / "error.txt"))
    try:
        actor.start()
        code = actor.proc.wait(60)
    finally:
        actor.stop()
        server.close()
        samples.close(0)
    assert code == exit_codes.EXIT_SERVER_TIMEOUT
    assert message in read_error(str(tmp_path / "error.txt"))


def test_actor_thread_exits_when_its_learner_takes_no_samples(context, tmp_path):
    server = InprocServer(context)
    # Never bound: ZeroMQ queues the actor's segments for it up to the high-water mark.
    actor = _actor(context, server.address, "inproc://nobody-reads-this", sample_timeout_s=2.0,
                   ping_interval_s=0.5, error_file=str(tmp_path / "error.txt"))
    try:
        actor.start()
        code = actor.proc.wait(60)
    finally:
        actor.stop()
        server.close()
    assert code == exit_codes.EXIT_LEARNER_TIMEOUT
    assert "did not take a segment in time" in read_error(str(tmp_path / "error.txt"))
    assert len(server.pings) >= 2 and server.pings[0] == {"actor": 0, "run": actor.spec["run_id"]}


def test_actor_thread_stops_cleanly_on_terminate(context):
    """``terminate`` is the thread's SIGTERM: the actor leaves its loop and exits 0."""
    server = InprocServer(context)
    samples = context.socket(zmq.PULL)
    actor = _actor(context, server.address, sockets.bind(samples, sockets.INPROC, name="samples"))
    try:
        actor.start()
        wait_for(lambda: server.answered >= 5, 60, "the actor to step")
        actor.proc.terminate()
        code = actor.proc.wait(30)
    finally:
        actor.stop()
        server.close()
        samples.close(0)
    assert code == 0


@pytest.mark.parametrize("argv, env, prefix, match", [
    ([sys.executable, "-m", "jaxsrl.workers.learner", "{}"], {}, (), "actor workers only"),
    ([sys.executable, "-m", "jaxsrl.workers.actor", "{}"], {"KEY": "1"}, (), "environment variables"),
    ([sys.executable, "-m", "jaxsrl.workers.actor", "{}"], {}, ("ip", "netns"), "launch_prefix"),
])
def test_thread_spawner_refuses_what_a_thread_cannot_do(context, argv, env, prefix, match):
    with pytest.raises(ValueError, match=match):
        ThreadSpawner(context)(argv, env, prefix)


# -- the command line --------------------------------------------------------------------
def test_sigterm_stops_a_serial_train_py_with_a_checkpoint(tmp_path):
    """The serial twin of the signal test: scripts/train.py --launcher=serial stops on
    SIGTERM with its checkpoint (exit 130), never having started a child process."""
    logdir = str(tmp_path / "run")
    args = [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
            *small_args(logdir, SERIAL, "--total_env_steps=100000000")]
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    children: set = set()

    def started():
        try:
            children.update(c.pid for c in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        return any(r["policy_version"] >= 2 for r in records(logdir)) or proc.poll() is not None

    try:
        wait_for(started, 180, "training to start")
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output
    assert "checkpoint of default at version" in output
    assert children == set()
    ckpt = Checkpointer(os.path.join(logdir, "checkpoints", "default"))
    assert ckpt.latest_step() is not None and ckpt.latest_step() >= 2
    ckpt.close()
