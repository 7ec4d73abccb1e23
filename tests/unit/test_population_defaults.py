"""``--population=N`` alone is a valid run: a default ready interval and a learning-rate
search space around the agent's configured rate, both overridable; a setting that has
no default names the shipped config that sets it."""

from __future__ import annotations

import types

import pytest

from jaxsrl.experiment import population
from jaxsrl.experiment.config import load_config


def test_population_alone_passes_validation_with_documented_defaults():
    cfg = load_config(["--env=CartPole-v1", "--population=4"])  # validates
    assert population.ready_interval(cfg.pbt) == (population.DEFAULT_READY_ENV_STEPS, 0) == (20_000, 0)
    lr = cfg.ppo.learning_rate
    (name, r), = population.search_space(cfg).items()
    assert name == "learning_rate" and r.log
    assert r.min == pytest.approx(lr / 10) and r.max == pytest.approx(lr * 10)
    drawn = population.initial_hyper(cfg)
    assert sorted(drawn) == ["member0", "member1", "member2", "member3"]
    assert all(r.contains(h["learning_rate"]) for h in drawn.values())


def test_the_defaults_are_overridable(tmp_path):
    cfg = load_config(["--env=CartPole-v1", "--population=4", "--pbt.ready_versions=5"])
    assert population.ready_interval(cfg.pbt) == (0, 5)
    cfg = load_config(["--env=CartPole-v1", "--population=4", "--pbt.ready_env_steps=3000"])
    assert population.ready_interval(cfg.pbt) == (3000, 0)
    toml = tmp_path / "pbt.toml"
    toml.write_text("population = 2\n[pbt.search_space]\nent_coef = {min = 0.0, max = 0.05}\n")
    space = population.search_space(load_config([f"--config={toml}"]))
    assert list(space) == ["ent_coef"]  # the given table replaces the default


def test_two_ready_intervals_are_refused_naming_the_shipped_config():
    with pytest.raises(ValueError, match=r"at most one of pbt.ready_env_steps and pbt.ready_versions "
                                         r"\(got 10 and 2; see configs/pbt_cartpole.toml\)"):
        load_config(["--population=2", "--pbt.ready_env_steps=10", "--pbt.ready_versions=2"])


def test_no_default_search_space_names_the_shipped_config():
    cfg = types.SimpleNamespace(agent="ppo", population=4, agent_config=lambda: types.SimpleNamespace())
    with pytest.raises(ValueError, match=r"population=4 needs a \[pbt.search_space\] table \(agent 'ppo' "
                                         r"has no learning_rate .*configs/pbt_cartpole.toml"):
        population.default_search_space(cfg)
