"""A run is never lost or silently changed at its seams: from the command line, a start
that fails a check leaves the old run in the folder byte for byte, ``--overwrite``
deletes only the run's own files, and a folder holding only a tee'd log is a new run's
folder (the log left alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from jaxsrl.experiment.run_dir import LOCK_NAME, RunDir
from test_faults_helpers import REPO_ROOT, SMALL

TRAIN = os.path.join(REPO_ROOT, "scripts", "train.py")
TIMEOUT_S = 600  # generous bound on one tiny run on a loaded 2-core machine
FOREIGN = {"train.log": "05:00 jaxsrl steps 0\n", "README.txt": "notes",
           os.path.join("src", "model.py"): "import jax\n"}


def _train(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TRAIN, *flags], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=os.environ | {"JAXSRL_PROGRESS": "0"})


def _snapshot(root: str) -> dict:
    """``{relative path: bytes}`` of every file under ``root`` but the lock."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name != LOCK_NAME:
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
    return out


def _add_foreign(logdir: str) -> None:
    os.makedirs(os.path.join(logdir, "src"), exist_ok=True)
    for name, text in FOREIGN.items():
        with open(os.path.join(logdir, name), "w") as f:
            f.write(text)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> str:
    """A finished tiny CartPole run (config, metrics, events, a checkpoint)."""
    logdir = str(tmp_path_factory.mktemp("seams") / "run")
    out = _train(*SMALL, "--total_env_steps=500", f"--logdir={logdir}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert RunDir(logdir).has_checkpoint()
    return logdir


def test_a_failing_start_with_overwrite_leaves_the_old_run_whole(cartpole_run, tmp_path):
    logdir = str(tmp_path / "run")
    shutil.copytree(cartpole_run, logdir)
    before = _snapshot(logdir)
    out = _train("--agent=dqn", "--env=Pendulum-v1", f"--logdir={logdir}", "--overwrite")
    assert out.returncode == 2 and "dqn needs a Discrete action space" in out.stderr, out.stderr[-3000:]
    assert _snapshot(logdir) == before  # every file there, byte for byte


def test_overwrite_deletes_the_run_but_never_files_jaxsrl_did_not_write(cartpole_run, tmp_path):
    logdir = str(tmp_path / "run")
    shutil.copytree(cartpole_run, logdir)
    _add_foreign(logdir)
    old_config = RunDir(logdir).read_config()
    out = _train(*SMALL, "--total_env_steps=300", "--seed=5", f"--logdir={logdir}", "--overwrite")
    assert out.returncode == 0, out.stderr[-3000:]
    assert RunDir(logdir).read_config()["seed"] == 5 and old_config["seed"] == 0
    for name, text in FOREIGN.items():
        with open(os.path.join(logdir, name)) as f:
            assert f.read() == text, name


def test_a_folder_holding_only_a_teed_log_is_a_new_runs_folder(tmp_path):
    """``train.py ... --logdir runs/x 2>&1 | tee runs/x/train.log``: the run starts, and
    the log holds its whole output."""
    logdir = tmp_path / "run"
    logdir.mkdir()
    command = " ".join([sys.executable, TRAIN, *SMALL, "--total_env_steps=300",
                        f"--logdir={logdir}", "2>&1 | tee", str(logdir / "train.log")])
    out = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=TIMEOUT_S,
                         env=os.environ | {"JAXSRL_PROGRESS": "0"})
    assert out.returncode == 0, out.stdout[-3000:]
    log = (logdir / "train.log").read_text()
    assert "done:" in log and log == out.stdout  # tee wrote it all; jaxsrl left it alone
    assert RunDir(str(logdir)).read_config()["env"] == "CartPole-v1"
