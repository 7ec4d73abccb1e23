"""``--inline_inference`` end to end: CartPole PPO trained by inline actors (each runs
``act`` itself with parameters from the learner's parameter stream; no inference
server), as actor processes and as serial-mode threads (the settings it refuses:
``tests/unit/test_inline_config.py``)."""

from __future__ import annotations

import os

import psutil

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train
from test_end_to_end import SMALL, TWO_POLICIES
from test_faults_helpers import records, train_until, wait_for

INLINE = "--inline_inference"  # the old flag, an alias of --inference=inline
# SMALL pins --inference=server, which contradicts INLINE (refused in one line).
SMALL = [a for a in SMALL if not a.startswith("--inference")]


def _intervals(logdir: str) -> list[dict]:
    return RunDir(logdir).read_metrics(final=False)


def test_inline_actor_processes_train_cartpole(tmp_path):
    """Two inline actor processes (``python -m jaxsrl.workers.inline``) feed the learner:
    it updates, its versions reach the actors (``param_lag/inline``), no server batches.

    No reachable step budget: the test stops the run (SIGTERM) once both are seen (a
    6,000-step run could end under load before the actors' first status, sent each
    second, had been logged)."""
    logdir = str(tmp_path / "run")
    cfg = load_config(SMALL + [INLINE, "--total_env_steps=100000000", f"--logdir={logdir}"])

    def watch(out):
        wait_for(lambda: any("param_lag/inline" in r for r in records(logdir))
                 and max(r.get("policy_version", 0) for r in records(logdir)) >= 2,
                 120, "updates and the inline actors' statuses")

    train_until(cfg, watch)
    intervals = _intervals(logdir)
    assert any("episode_return_mean" in r for r in intervals)
    assert any("param_lag/inline" in r for r in intervals)  # statuses of the actors arrived
    assert not any("dropped_status" in r for r in intervals)  # each passed its schema
    assert not any("inference/batches" in r for r in intervals)  # no inference server ran
    assert psutil.Process().children(recursive=True) == []


def test_auto_runs_inline_on_a_cpu_only_machine_and_records_the_mode(tmp_path):
    """``--inference=auto`` (the default) picks inline here (no accelerator): the run's
    ``config.json`` (``inference_resolved``) and ``run_start`` event say so, and no
    server batches."""
    logdir = str(tmp_path / "run")
    record = train(load_config(SMALL + ["--inference=auto", "--total_env_steps=3000",
                                        f"--logdir={logdir}"]))
    assert record["env_steps"] >= 3000
    saved = RunDir(logdir).read_config()  # "auto" as given (resolved again on --resume)
    assert (saved["inference"], saved["inference_resolved"]) == ("auto", "inline")
    (start,) = RunDir(logdir).read_events("run_start")
    assert start["inference"] == "inline"
    assert start["devices"].startswith("learner cpu:")  # the first log line names them
    assert start["devices"].endswith("inference cpu in each inline actor process")
    assert not any("inference/batches" in r for r in _intervals(logdir))


def test_auto_keeps_the_server_where_inline_does_not_fit(tmp_path):
    """The same with a setting of servers (``--inference_deadline_ms``): the server runs."""
    logdir = str(tmp_path / "run")
    train(load_config(SMALL + ["--inference=auto", "--inference_deadline_ms=1",
                               "--total_env_steps=3000", f"--logdir={logdir}"]))
    saved = RunDir(logdir).read_config()
    assert (saved["inference"], saved["inference_resolved"]) == ("auto", "thread")
    (start,) = RunDir(logdir).read_events("run_start")
    assert start["inference"] == "thread"
    assert any("inference/batches" in r for r in _intervals(logdir))


def test_serial_inline_cartpole_learns(tmp_path):
    """Serial mode (actors are threads acting in this process): CartPole learns."""
    logdir = str(tmp_path / "run")
    cfg = load_config(["--launcher=serial", INLINE, "--env=CartPole-v1", f"--logdir={logdir}",
                       "--total_env_steps=400000", "--target_return=150", "--log_interval_s=1"])
    record = train(cfg)
    assert record["episode_return_mean"] >= 150, record
    staleness = [r["staleness_mean"] for r in _intervals(logdir) if "staleness_mean" in r]
    assert staleness and min(staleness) >= 0


def test_inline_actors_feed_two_policies(tmp_path):
    """A dataflow of two policies: each inline actor subscribes to its own policy."""
    toml = tmp_path / "graph.toml"
    toml.write_text(TWO_POLICIES)
    logdir = str(tmp_path / "run")
    record = train(load_config(SMALL + ["--launcher=serial", INLINE, f"--config={toml}",
                                        "--total_env_steps=8000", f"--logdir={logdir}"]))
    assert all(record[f"policy_version/{p}"] >= 1 for p in ("a", "b"))
    for p in ("a", "b"):
        assert os.listdir(os.path.join(logdir, "checkpoints", p))
