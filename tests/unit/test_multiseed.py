"""The multi-seed runner: summaries from run folders, and two real (tiny) seeds."""

import json
import math
import os

import pytest

from jaxsrl.tools import multiseed


def _run_folder(path, returns, steps, times):
    os.makedirs(path)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r, s, t in zip(returns, steps, times):
            f.write(json.dumps({"episode_return_mean": r, "env_steps": s, "wall_time_s": t}) + "\n")


def test_first_crossing_final_return_and_medians(tmp_path):
    _run_folder(tmp_path / "a", [100, 2900, 3100, 2800], [1, 2, 3, 4], [10, 20, 30, 40])
    _run_folder(tmp_path / "b", [float("nan"), 3500, 3600], [1, 2, 3], [5, 15, 25])
    _run_folder(tmp_path / "c", [10, 20], [1, 2], [1, 2])  # never reaches
    seeds = [{"seed": i, **multiseed.summarise_seed(str(tmp_path / n), 3000)}
             for i, n in enumerate("abc")]
    assert seeds[0]["reached"] == {"env_steps": 3, "wall_time_s": 30}
    assert seeds[0]["final_return"] == 2800 and seeds[1]["final_return"] == 3600
    assert seeds[2]["reached"] is None
    summary = multiseed.summarise(seeds, 3000)
    assert summary["reached"] == 2
    assert summary["median_time_to_threshold_s"] == 30  # of 15, 30, inf
    assert summary["median_steps_to_threshold"] == 3
    assert summary["median_final_return"] == 2800
    table = multiseed.format_table({**summary, "per_seed": seeds})
    assert "| median | 2,800 |" in table and table.count("\n") == len(seeds) + 2
    assert math.isinf(multiseed.summarise(seeds[2:], 3000)["median_time_to_threshold_s"])


def test_seed_and_logdir_flags_and_existing_folders_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--seed"):
        multiseed.run_seeds(["--env=CartPole-v1", "--seed=3"], [0], str(tmp_path))
    os.makedirs(tmp_path / "seed_1")
    with pytest.raises(ValueError, match="seed_1 exists"):
        multiseed.run_seeds(["--env=CartPole-v1"], [0, 1], str(tmp_path))


def test_two_tiny_seeds_train_evaluate_and_summarise(tmp_path):
    # One XLA cache for both seeds, new to this test: the second seed loads the programs
    # the first compiled (the same config) instead of compiling them again.
    args = ["--env=CartPole-v1", "--num_actors=1", "--envs_per_actor=4", "--segment_length=16",
            "--batch_segments=4", "--total_env_steps=1500",
            f"--compilation_cache_dir={tmp_path / 'xla'}"]
    summary = multiseed.run_seeds(args, [0, 1], str(tmp_path), threshold=1.0, eval_episodes=1)
    with open(tmp_path / "summary.json") as f:
        assert json.load(f)["seeds"] == 2
    for s in summary["per_seed"]:
        assert s["train_rc"] == 0 and s["eval_rc"] == 0, s
        assert s["env_steps"] >= 1500 and s["eval_return"] >= 1.0
        assert s["reached"]["wall_time_s"] > 0  # CartPole returns are >= 1 at once
    assert summary["reached"] == 2
