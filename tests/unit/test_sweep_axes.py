"""The Ray Tune sweep wrapper's own parts: axes, refused flags, the summary table."""

import json
import os

import pytest
from ray import tune

from jaxsrl.tools import sweep


def test_axes_parse_into_tune_domains():
    axes = [sweep.parse_axis(a) for a in ("ppo.lr=loguniform(1e-5, 1e-2)", "seed=grid(0, 1, 2)",
                                          "ppo.ent_coef=uniform(0, 0.05)", "envs_per_actor=choice(4, 8)",
                                          "num_actors=randint(1, 3)")]
    assert axes[0] == ("ppo.lr", "loguniform", (1e-5, 1e-2))
    assert axes[1] == ("seed", "grid", (0, 1, 2))
    space = sweep.search_space(axes)
    assert isinstance(space["ppo.lr"], tune.search.sample.Float)
    assert space["ppo.lr"].lower == 1e-5 and space["ppo.lr"].upper == 1e-2
    assert space["seed"] == {"grid_search": [0, 1, 2]}
    assert space["envs_per_actor"].categories == [4, 8]
    assert space["num_actors"].lower == 1 and space["num_actors"].upper == 3
    assert sweep.flags_of({"ppo.lr": 0.001, "seed": 1}) == ["--ppo.lr=0.001", "--seed=1"]


@pytest.mark.parametrize("text, message", [
    ("lr", "expected NAME=KIND"),
    ("lr=normal(0, 1)", "unknown kind 'normal'"),
    ("lr=uniform(1)", "two numbers lo < hi"),
    ("lr=uniform(2, 1)", "two numbers lo < hi"),
    ("lr=loguniform(0, 1)", "lo > 0"),
    ("lr=choice()", "at least one value"),
    ("lr=choice(a b)", "Python literals"),
])
def test_bad_axes_are_refused_naming_them(text, message):
    with pytest.raises(ValueError, match=message) as info:
        sweep.parse_axis(text)
    assert repr(text) in str(info.value)


def test_an_axis_given_twice_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"given twice: \['seed'\]"):
        sweep.search_space([sweep.parse_axis("seed=grid(0, 1)"), sweep.parse_axis("seed=choice(2)")])
    with pytest.raises(ValueError, match=r"given twice: \['seed'\]"):
        sweep.run_sweep([], ["seed=grid(0, 1)", "seed=grid(2)"], str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()


def test_flags_the_sweep_sets_and_unknown_train_flags_are_refused_before_ray_starts(tmp_path):
    with pytest.raises(ValueError, match="--logdir is set by the sweep"):
        sweep.run_sweep(["--logdir=x"], ["seed=grid(0)"], str(tmp_path / "s"))
    with pytest.raises(ValueError, match="does not parse"):
        sweep.run_sweep([], ["no_such_flag=grid(0)"], str(tmp_path / "s"))
    with pytest.raises(ValueError, match="--seed is both a train flag and an axis"):
        sweep.run_sweep(["--seed=3"], ["seed=grid(0)"], str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="at least one --axis"):
        sweep.run_sweep([], [], str(tmp_path / "s"))
    os.makedirs(tmp_path / "full")
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        sweep.run_sweep([], ["seed=grid(0)"], str(tmp_path / "full"))


def test_summary_orders_trials_best_first_and_tables_them(tmp_path):
    os.makedirs(tmp_path / "trials")
    for trial, ret in (("a", 10.0), ("b", None), ("c", 300.5)):
        with open(tmp_path / "trials" / f"{trial}.json", "w") as f:
            json.dump({"trial": trial, "config": {"seed": ord(trial), "lr": 3e-4}, "rc": 0,
                       "final_return": ret,
                       "best_return": ret, "env_steps": 1000, "wall_s": 3.0,
                       "logdir": str(tmp_path / "trials" / trial)}, f)
    summary = sweep.write_summary(str(tmp_path))
    assert [t["trial"] for t in summary["trials"]] == ["c", "a", "b"]
    table = (tmp_path / "summary.md").read_text()
    assert table.splitlines()[2].startswith("| c | 0.0003 | 99 | 0 | 300.5 | 300.5 | 1,000 | 3.0 | trials/c |")
    assert "| b | 0.0003 | 98 | 0 | n/a |" in table
