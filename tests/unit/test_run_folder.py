"""A run folder belongs to one run: a folder holding a run is refused without
--resume/--overwrite, a second live run is refused by the folder's lock, and resuming
past an unreadable newest checkpoint neither collides with it nor reports it as saved."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from jaxsrl.experiment import events
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config
from jaxsrl.launch.launcher import train
from jaxsrl.experiment.run_dir import LOCK_NAME, RunDir, RunFolderError, claim
from test_faults_helpers import REPO_ROOT

TINY = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=4", "--segment_length=8",
        "--batch_segments=4", "--log_interval_s=0.5", "--ppo.hidden_sizes", "8", "8",
        "--compilation_cache_dir="]

HOLD_LOCK = ("import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
             "print('held', flush=True); time.sleep(120)")


def test_a_folder_holding_a_run_is_refused_without_resume_or_overwrite(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    (logdir / "config.json").write_text("{}")
    with pytest.raises(RunFolderError, match=r"already holds a run \(config.json\).*--resume.*--overwrite"):
        claim(str(logdir), resume=False, overwrite=False)
    claim(str(logdir), resume=True, overwrite=False).release()  # continuing it is fine
    assert (logdir / "config.json").exists()


def test_train_py_refuses_it_with_one_line_and_exit_code_2(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    (logdir / "metrics.jsonl").write_text("")
    out = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *TINY,
                          f"--logdir={logdir}"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--resume" in errors[0] and "--overwrite" in errors[0], out.stderr


def test_overwrite_replaces_a_run_but_never_a_folder_that_is_not_one(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "default" / "3").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    claim(str(run), resume=False, overwrite=True).release()
    assert sorted(os.listdir(run)) == [LOCK_NAME]
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(RunFolderError, match="holds no jaxsrl run.*not deleting"):
        claim(str(home), resume=False, overwrite=True)
    assert (home / "thesis.tex").read_text() == "precious"


def test_resume_and_overwrite_together_are_refused():
    with pytest.raises(ValueError, match="--resume and --overwrite"):
        load_config(["--resume", "--overwrite"])


def test_a_second_live_run_is_refused_until_the_first_one_is_gone(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(logdir / LOCK_NAME)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cfg = load_config(TINY + [f"--logdir={logdir}", "--total_env_steps=100"])
        with pytest.raises(RunFolderError, match="in use by another live run"):
            train(cfg)  # refused before any process starts or any file is written
        assert sorted(os.listdir(logdir)) == [LOCK_NAME]
    finally:
        holder.kill()
        holder.wait()
    claim(str(logdir), resume=False, overwrite=False).release()  # a killed run leaves no lock


def _tree(v: float) -> dict:
    return {"w": np.full(4, v, np.float32)}


def test_resuming_past_an_unreadable_checkpoint_frees_its_step(tmp_path, caplog):
    """Also: the warnings it logs are one line each (a multi-line Orbax error is cut)."""
    directory = str(tmp_path / "ckpt")
    ckpt = Checkpointer(directory)
    for step in (1, 2):
        ckpt.save(step, _tree(step), {"policy_version": step})
    ckpt.close()
    shutil.rmtree(os.path.join(directory, "2", "state"))  # damaged after it was finalised
    ckpt = Checkpointer(directory)
    with caplog.at_level(logging.WARNING, logger="jaxsrl.experiment.checkpoint"), \
            events.recording(str(tmp_path / "events.jsonl")):
        state, meta = ckpt.restore(_tree(0), set_aside_unreadable=True)
    assert meta["policy_version"] == 1
    assert ckpt.latest_step() == 1  # what the closing line and the trainer's save see
    ckpt.save(2, _tree(22), {"policy_version": 2})  # no StepAlreadyExistsError
    ckpt.close()
    assert float(Checkpointer(directory).restore(_tree(0))[0]["w"][0]) == 22.0
    assert os.path.isdir(os.path.join(directory, "2.unreadable"))  # kept for inspection
    (moved,) = events.read_events(str(tmp_path / "events.jsonl"), "checkpoint_set_aside")
    assert moved | {"step": 2, "restored": 1} == moved
    assert moved["moved_to"] == os.path.join(directory, "2.unreadable")
    warnings = [r.getMessage() for r in caplog.records  # tried again, unreadable, set aside
                if r.name == "jaxsrl.experiment.checkpoint" and r.levelno == logging.WARNING]
    assert len(warnings) == 3 and all("\n" not in w and len(w) < 600 for w in warnings)


def test_resume_with_a_corrupt_newest_checkpoint_and_frequent_saves(tmp_path):
    logdir = str(tmp_path / "run")
    ckdir = os.path.join(logdir, "checkpoints", "default")
    train(load_config(TINY + [f"--logdir={logdir}", "--total_env_steps=1500",
                              "--checkpoint_interval_s=0.2"]))
    steps = sorted(int(n) for n in os.listdir(ckdir) if n.isdigit())
    assert len(steps) >= 2, steps
    shutil.rmtree(os.path.join(ckdir, str(steps[-1]), "state"))
    record = train(load_config(TINY + [f"--logdir={logdir}", "--resume", "--total_env_steps=3000",
                                       "--checkpoint_interval_s=0.01"]))
    assert record["env_steps"] >= 3000
    saved = RunDir(logdir).read_events("run_end")[-1]["checkpoints"]["default"]
    ckpt = Checkpointer(ckdir)
    assert ckpt.latest_step() == saved
    _, meta = ckpt.restore(None, step=saved)  # the checkpoint the closing line names is readable
    assert meta["policy_version"] == saved and saved > steps[-2]
    ckpt.close()
