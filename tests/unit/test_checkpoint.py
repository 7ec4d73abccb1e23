"""Checkpoints: save, restore, identical state; newest complete checkpoint wins."""

import jax
import numpy as np
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.envs import env_spaces


def _state(seed):
    agent = get_agent("ppo")
    fns = agent.make(agent.config_cls(), EnvSpec(*env_spaces("CartPole-v1")), 10)
    return {"agent": fns.init(jax.random.PRNGKey(seed)), "rng": jax.random.PRNGKey(seed + 1)}


def _assert_trees_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_save_restore_identical(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    state = _state(0)
    ckpt.save(5, state, {"policy_version": 5, "env_steps": 1234})
    ckpt.manager.wait_until_finished()
    restored, meta = ckpt.restore(_state(99))  # a different state only gives the structure
    _assert_trees_equal(restored, state)
    assert meta == {"policy_version": 5, "env_steps": 1234}
    ckpt.close()


def test_restore_picks_newest_and_missing_raises(tmp_path):
    ckpt = Checkpointer(str(tmp_path / "ckpt"), max_to_keep=2)
    for step in (1, 2, 3):
        ckpt.save(step, _state(step), {"policy_version": step})
    ckpt.manager.wait_until_finished()
    restored, meta = ckpt.restore(_state(0))
    assert meta["policy_version"] == 3
    _assert_trees_equal(restored, _state(3))
    assert sorted(ckpt.manager.all_steps()) == [2, 3]
    ckpt.close()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Checkpointer(str(tmp_path / "empty")).restore(_state(0))
