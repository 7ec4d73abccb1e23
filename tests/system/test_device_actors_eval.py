"""Evaluation of device-actor runs (issue 30): ``--eval_every`` writes the CPU path's
evaluation files and ``eval/*`` metrics, and ``scripts/evaluate.py`` on the run folder
(``jaxsrl.cli.evaluate``) evaluates its checkpoints on the JAX-native env, with the same
returns as the periodic evaluation of that version, and writes a video."""

from __future__ import annotations

import json
import os

import pytest

from jaxsrl.cli import evaluate as evaluate_cli
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.launcher import train

pytest.importorskip("gymnax")

SMALL = ["--env=gymnax:CartPole-v1", "--segment_length=16", "--batch_segments=8",
         "--log_interval_s=0.5", "--ppo.hidden_sizes", "16", "16"]


def test_eval_every_then_evaluate_py_on_the_run_folder(tmp_path, capsys):
    logdir = str(tmp_path / "run")
    # 10 updates of 8 x 16 steps: evaluations every 4 versions, each in a process of its
    # own as on CPU actors (one at a time: a version is skipped while one runs); the run
    # waits for the running one at its end.
    out = train(load_config(SMALL + ["--total_env_steps=1280", "--eval_every=4",
                                     "--eval_episodes=2", f"--logdir={logdir}"]))
    assert out["policy_version"] >= 10
    run = RunDir(logdir)
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    versions = [r["eval/policy_version"] for r in records if "eval/policy_version" in r]
    assert versions and versions[0] >= 4.0  # each evaluation in one record
    assert all(b - a >= 4 for a, b in zip(versions, versions[1:]))
    first = int(versions[0])
    with open(run.eval_file(first)) as f:
        saved = json.load(f)
    assert saved["summary"]["episodes"] == 2 and saved["summary"]["deterministic"] is True
    assert len(saved["episodes"]) == 2 and 1 <= saved["summary"]["return_mean"] <= 500
    checkpoint = saved["checkpoints"]["default"]
    assert os.path.dirname(checkpoint) == run.checkpoint_dir("default")
    assert int(os.path.basename(checkpoint)) >= first  # the newest when it started
    record = next(r for r in records if r.get("eval/policy_version") == versions[0])
    assert record["eval/return_mean"] == saved["summary"]["return_mean"]

    # scripts/evaluate.py on that checkpoint: the same episodes (same key, greedy actions).
    again = str(tmp_path / "again.json")
    assert evaluate_cli.main(["--checkpoint", checkpoint, "--episodes", "2", "--json", again]) == 0
    with open(again) as f:
        assert json.load(f)["episodes"] == saved["episodes"]

    # On the run folder (newest checkpoint), with a video of one episode.
    video = str(tmp_path / "cp.gif")
    assert evaluate_cli.main(["--logdir", logdir, "--episodes", "2", "--video", video,
                              "--video_episode", "1", "--video_every", "50"]) == 0
    printed = capsys.readouterr().out
    assert "gymnax:CartPole-v1: 2 episodes, deterministic actions" in printed
    assert os.path.getsize(video) > 0 and f"video: {video}" in printed
