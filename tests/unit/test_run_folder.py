"""A run folder belongs to one run: a folder holding a run is refused without
--resume/--overwrite, --overwrite deletes only the run's own entries (never a file jaxsrl
did not write), a folder of foreign files only is a new run's folder, a second live run
is refused by the folder's lock, and resuming past an unreadable newest checkpoint
neither collides with it nor reports it as saved."""

from __future__ import annotations

import json
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
from jaxsrl.experiment.run_dir import (LOCK_NAME, RunDir, RunFolderError, claim, holds_run,
                                       is_run_config, prepare)
from test_faults_helpers import REPO_ROOT

TINY = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=4", "--segment_length=8",
        "--batch_segments=4", "--log_interval_s=0.5", "--ppo.hidden_sizes", "8", "8",
        "--compilation_cache_dir="]

HOLD_LOCK = ("import filelock, sys, time; lock = filelock.FileLock(sys.argv[1]); lock.acquire(); "
             "print('held', flush=True); time.sleep(120)")


def _run(logdir) -> None:
    """A run's files in ``logdir``, as jaxsrl writes them (the config marked as jaxsrl's)."""
    RunDir(str(logdir)).write_config({"agent": "ppo", "env": "CartPole-v1"})
    (logdir / "metrics.jsonl").write_text('{"env_steps": 64}\n')
    (logdir / "run_events.jsonl").write_text("{}\n")
    (logdir / "events.out.tfevents.123.host").write_text("tb")
    (logdir / "errors").mkdir()
    (logdir / "errors" / "actor0.txt").write_text("trace")
    step = logdir / "checkpoints" / "default" / "3"
    (step / "meta").mkdir(parents=True)
    (step / "meta" / "metadata").write_text('{"policy_version": 3}')


def _foreign(logdir) -> dict:
    """Files a user keeps beside a run: a tee'd log, notes, sources."""
    (logdir / "src").mkdir(parents=True, exist_ok=True)
    files = {"train.log": "05:00 jaxsrl steps 0\n", "README.txt": "notes",
             os.path.join("src", "model.py"): "import jax\n"}
    for name, text in files.items():
        (logdir / name).write_text(text)
    return files


def test_a_folder_holding_a_run_is_refused_without_resume_or_overwrite(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    _run(logdir)
    with pytest.raises(RunFolderError, match=r"already holds a run \(checkpoints, config.json, errors, "
                                             r"\.\.\.\).*--resume.*--overwrite"):
        claim(str(logdir), resume=False, overwrite=False)
    claim(str(logdir), resume=True, overwrite=False).release()  # continuing it is fine
    assert (logdir / "config.json").exists()


def test_what_counts_as_a_run(tmp_path):
    """jaxsrl's marked config.json, an older one with the launcher's keys, or a jaxsrl
    checkpoint; never other files, nor a config.json of another program."""
    config = tmp_path / "config.json"
    RunDir(str(tmp_path)).write_config({"agent": "ppo"})
    assert json.loads(config.read_text())["jaxsrl"]["format"] == 1 and is_run_config(str(config))
    legacy = {"agent": "ppo", "env": "CartPole-v1", "total_env_steps": 10, "seed": 0,
              "logdir": "runs/x", "resume": False}  # written before the marker
    config.write_text(json.dumps(legacy))
    assert is_run_config(str(config))
    for other in ("{}", '{"agent": "ppo", "env": "x"}', "[1, 2]", '{"model": "bert"}', "{trunc"):
        config.write_text(other)
        assert not is_run_config(str(config)), other
    assert not holds_run(str(tmp_path))
    (tmp_path / "checkpoints" / "default" / "7").mkdir(parents=True)  # empty: not a save
    assert not holds_run(str(tmp_path))
    (tmp_path / "checkpoints" / "default" / "7" / "meta").mkdir()
    (tmp_path / "checkpoints" / "default" / "7" / "meta" / "metadata").write_text(
        '{"policy_version": 7, "env_steps": 900}')
    assert holds_run(str(tmp_path))


def test_overwrite_deletes_only_the_runs_own_entries_and_only_in_prepare(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    _run(logdir)
    foreign = _foreign(logdir)
    lock = claim(str(logdir), resume=False, overwrite=True)
    try:
        assert (logdir / "config.json").exists()  # claim deletes nothing
        assert prepare(str(logdir), overwrite=True) == [
            "checkpoints", "config.json", "errors", "events.out.tfevents.123.host",
            "metrics.jsonl", "run_events.jsonl"]
    finally:
        lock.release()
    assert sorted(os.listdir(logdir)) == sorted([LOCK_NAME, "README.txt", "src", "train.log"])
    for name, text in foreign.items():
        assert (logdir / name).read_text() == text


def test_a_folder_of_foreign_files_is_a_new_runs_folder(tmp_path):
    """Only a log (``| tee LOGDIR/train.log``), or notes and sources: a new run starts
    there with or without --overwrite, and --overwrite deletes none of it."""
    logdir = tmp_path / "run"
    foreign = _foreign(logdir)
    for overwrite in (False, True):
        lock = claim(str(logdir), resume=False, overwrite=overwrite)
        try:
            assert prepare(str(logdir), overwrite) == []
        finally:
            lock.release()
        for name, text in foreign.items():
            assert (logdir / name).read_text() == text


def test_entries_named_like_a_runs_that_jaxsrl_did_not_write_are_never_emptied(tmp_path):
    """A project folder with README.txt, src/model.py and an empty checkpoints/ (not
    jaxsrl's): refused with or without --overwrite, nothing deleted."""
    home = tmp_path / "home"
    foreign = _foreign(home)
    (home / "checkpoints").mkdir()
    for overwrite in (False, True):
        with pytest.raises(RunFolderError, match=r"holds checkpoints, which no jaxsrl run wrote.*"
                                                 r"not using or deleting them"):
            claim(str(home), resume=False, overwrite=overwrite)
    assert (home / "checkpoints").is_dir()
    for name, text in foreign.items():
        assert (home / name).read_text() == text


def test_train_py_refuses_it_with_one_line_and_exit_code_2(tmp_path):
    logdir = tmp_path / "run"
    logdir.mkdir()
    _run(logdir)
    out = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "train.py"), *TINY,
                          f"--logdir={logdir}"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--resume" in errors[0] and "--overwrite" in errors[0], out.stderr


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
    with open(os.path.join(ckdir, str(steps[-1]), "meta", "metadata")) as f:
        newest = json.load(f)
    shutil.rmtree(os.path.join(ckdir, str(steps[-1]), "state"))
    # The resume (from steps[-2]) saves at every update: it saves step steps[-1] again, then
    # 4 more, and stops (each save is an Orbax write: no more of them than that needs).
    per_update = newest["env_steps"] // newest["policy_version"]
    total = newest["env_steps"] + 4 * per_update
    record = train(load_config(TINY + [f"--logdir={logdir}", "--resume",
                                       f"--total_env_steps={total}",
                                       "--checkpoint_interval_s=0.01"]))
    assert record["env_steps"] >= total
    saved = RunDir(logdir).read_events("run_end")[-1]["checkpoints"]["default"]
    ckpt = Checkpointer(ckdir)
    assert ckpt.latest_step() == saved
    _, meta = ckpt.restore(None, step=saved)  # the checkpoint the closing line names is readable
    assert meta["policy_version"] == saved and saved > steps[-2]
    ckpt.close()


def test_a_resumed_runs_kept_configs_are_its_own_and_its_config_stays_marked(tmp_path):
    """``config.<n>.json`` (kept by a resume that changed settings) is deleted by
    ``--overwrite`` like the rest of the run; ``config.json`` rewritten on resume keeps
    jaxsrl's marker, and no ``.tmp`` file is left."""
    from jaxsrl.experiment.resume import commit_config

    logdir = tmp_path / "run"
    logdir.mkdir()
    _run(logdir)
    record = {"agent": "ppo", "env": "CartPole-v1", "total_env_steps": 1000}
    RunDir(str(logdir)).write_config(record)
    commit_config(str(logdir), {**record, "total_env_steps": 123_456})
    assert (logdir / "config.1.json").exists()
    assert RunDir(str(logdir)).read_config()["jaxsrl"]["format"] == 1
    assert not (logdir / "config.json.tmp").exists()
    lock = claim(str(logdir), resume=False, overwrite=True)
    try:
        assert "config.1.json" in prepare(str(logdir), overwrite=True)
    finally:
        lock.release()
    assert not (logdir / "config.1.json").exists()


def test_overwrite_keeps_user_files_that_only_look_like_the_runs(tmp_path):
    """A ``config.<n>.json`` without jaxsrl's marker, and files in ``eval/`` or ``errors/``
    not named as a run names them there, survive ``--overwrite``."""
    logdir = tmp_path / "run"
    logdir.mkdir()
    _run(logdir)
    (logdir / "config.7.json").write_text('{"lr": 1}')
    (logdir / "eval").mkdir()
    (logdir / "eval" / "v3.json").write_text("{}")
    (logdir / "eval" / "my_notes.txt").write_text("mine")
    (logdir / "errors" / "todo.md").write_text("mine")
    lock = claim(str(logdir), resume=False, overwrite=True)
    try:
        prepare(str(logdir), overwrite=True)
    finally:
        lock.release()
    assert (logdir / "config.7.json").read_text() == '{"lr": 1}'
    assert (logdir / "eval" / "my_notes.txt").read_text() == "mine"
    assert (logdir / "errors" / "todo.md").read_text() == "mine"
    assert not (logdir / "eval" / "v3.json").exists()
    assert not (logdir / "errors" / "actor0.txt").exists()
    assert not (logdir / "config.json").exists() and not (logdir / "checkpoints").exists()
