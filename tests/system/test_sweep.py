"""A real two-trial sweep on Ray Tune: one run folder per trial, the values reach the
runs, results stream to Tune, and the summary lists both trials."""

import json
import os

import psutil

from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.tools import sweep
from test_faults_helpers import wait_for

TINY = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=4", "--segment_length=8",
        "--batch_segments=4", "--total_env_steps=1200", "--log_interval_s=0.5"]


def test_two_trials_train_in_their_own_run_folders_and_are_summarised(tmp_path):
    root = str(tmp_path / "sweep")
    # One XLA cache for both trials, new to this test: the second trial (the same
    # programs, another seed) loads what the first compiled.
    cache = f"--compilation_cache_dir={tmp_path / 'xla'}"
    summary = sweep.run_sweep([*TINY, cache], ["seed=grid(3, 4)"], root, num_samples=1,
                              max_concurrent=1, cpus_per_trial=1.0)
    trials = summary["trials"]
    assert sorted(t["config"]["seed"] for t in trials) == [3, 4]
    for t in trials:
        assert t["rc"] == 0, t
        assert t["env_steps"] >= 1200 and t["final_return"] is not None
        run = RunDir(t["logdir"])
        assert run.read_config()["seed"] == t["config"]["seed"]  # the value reached the run
        assert os.path.dirname(t["logdir"]) == os.path.join(root, "trials")
    with open(os.path.join(root, "summary.json")) as f:
        assert len(json.load(f)["trials"]) == 2
    assert open(os.path.join(root, "summary.md")).read().count("\n") == 4  # header, rule, 2 rows
    # Tune got the runs' metrics records as the trials' results.
    results = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(root, "tune"))
               for f in files if f == "result.json"]
    assert len(results) == 2
    with open(results[0]) as f:
        assert any("env_steps" in json.loads(line) for line in f)
    # The local Ray the sweep started is shut down with it: no process of it is left
    # to the tests after this one.
    assert wait_for(lambda: not psutil.Process().children(recursive=True), 60,
                    "Ray's processes to exit")
