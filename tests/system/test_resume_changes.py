"""``--resume`` with changed settings (``jaxsrl/experiment/resume.py``): a change of the
learner state's structure is refused in one line before anything is written (the run
stays resumable), new hyperparameters take effect and are recorded, and ``config.json``
is replaced only after the restore, the previous one kept."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train
from test_faults_helpers import REPO_ROOT, records, small_args

# One process (serial launcher), a constant learning rate (logged as given), tiny budgets.
FLAGS = ("--launcher=serial", "--ppo.no_anneal_lr")


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A CartPole run (hidden sizes 16 x 16) that wrote its final checkpoint."""
    logdir = str(tmp_path_factory.mktemp("base") / "run")
    record = train(load_config(small_args(logdir, *FLAGS, "--total_env_steps=1000")))
    assert RunDir(logdir).has_checkpoint()
    return logdir, record


def _copy(saved_run, tmp_path) -> tuple[str, dict]:
    logdir = str(tmp_path / "run")
    shutil.copytree(saved_run[0], logdir)
    return logdir, saved_run[1]


def _files(logdir: str) -> dict:
    """Every file and folder of the run, with its content's hash."""
    out = {}
    for root, dirs, files in os.walk(logdir):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), logdir)] = "dir"
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), logdir)] = \
                    hashlib.sha256(f.read()).hexdigest()
    return out


def test_a_changed_network_shape_is_refused_and_the_run_stays_resumable(saved_run, tmp_path):
    logdir, first = _copy(saved_run, tmp_path)
    before = _files(logdir)
    more = f"--total_env_steps={first['env_steps'] + 1000}"
    out = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"),
         *small_args(logdir, *FLAGS, "--resume", more, "--ppo.hidden_sizes", "8", "8")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAXSRL_PROGRESS": "0"})
    last = (out.stdout + out.stderr).strip().splitlines()[-1]
    assert out.returncode == 2, out.stderr[-3000:]
    assert last.startswith(f"train.py: error: cannot resume {logdir}: changes the learner "
                           "state's structure: ppo.hidden_sizes [16, 16] -> [8, 8] ("), last
    assert _files(logdir) == before  # config.json byte-identical, nothing renamed or added

    record = train(load_config(small_args(logdir, *FLAGS, "--resume", more)))  # as before
    assert record["policy_version"] > first["policy_version"]
    assert RunDir(logdir).read_config()["ppo"]["hidden_sizes"] == [16, 16]


def test_a_learning_rate_given_with_resume_is_the_one_trained_at(saved_run, tmp_path):
    logdir, first = _copy(saved_run, tmp_path)
    old_lr = RunDir(logdir).read_config()["ppo"]["learning_rate"]
    assert old_lr != 1e-5
    n_before = len(records(logdir))
    record = train(load_config(small_args(logdir, *FLAGS, "--resume", "--ppo.learning_rate=1e-5",
                                          f"--total_env_steps={first['env_steps'] + 1500}")))
    assert record["policy_version"] > first["policy_version"]
    logged = [r["learning_rate"] for r in records(logdir)[n_before:] if "learning_rate" in r]
    assert logged and all(lr == pytest.approx(1e-5, rel=1e-5) for lr in logged), logged

    run = RunDir(logdir)
    assert run.read_config()["ppo"]["learning_rate"] == 1e-5
    with open(os.path.join(logdir, "config.1.json")) as f:
        assert json.load(f)["ppo"]["learning_rate"] == old_lr  # the previous record, kept
    (changed,) = run.read_events("hyperparameters_changed")
    assert changed["policy"] == "default"
    assert changed["changed"]["learning_rate"] == [pytest.approx(old_lr), pytest.approx(1e-5)]
    (config_changed,) = run.read_events("config_changed")
    assert config_changed["changed"]["ppo.learning_rate"] == [old_lr, 1e-5]
    assert config_changed["previous"] == os.path.join(logdir, "config.1.json")
