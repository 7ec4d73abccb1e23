"""Atari (ale-py) preprocessing as the actors see it, and a short Pong training run."""

import json
import os

import gymnasium
import numpy as np
import psutil
import pytest

from jaxsrl.experiment.config import load_config
from jaxsrl.envs import atari, check_env_name, env_spaces, make_actor_env, make_env
from jaxsrl.launch.launcher import train

pytest.importorskip("ale_py")


def _random_actions(env, rng):
    return rng.integers(0, env.action_space.n, env.num_rows).astype(np.int32)


def test_frames_are_stacked_uint8_channels_last():
    obs_space, act_space = env_spaces("ALE/Pong-v5")
    assert obs_space == gymnasium.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert act_space == gymnasium.spaces.Discrete(6)
    env = make_actor_env("ALE/Pong-v5", 2, seed=0)
    obs = env.reset()["obs"]
    assert obs.shape == (2, 84, 84, 4) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    for _ in range(40):
        step = env.step(_random_actions(env, rng))
        new = step.obs["obs"]
        assert new.dtype == np.uint8
        for i in np.flatnonzero(~(step.terminated | step.truncated)):
            # newest frame last: the stack shifts by one frame per step
            np.testing.assert_array_equal(new[i, ..., :-1], obs[i, ..., 1:])
        obs = new
    assert obs[..., -1].std() > 0  # a real screen, not padding
    env.close()


def test_training_clips_rewards_and_reports_raw_whole_games():
    """Space Invaders: 3 lives, 5-30 points per invader. Training sees sign(r) and a
    terminal per lost life; the reported episode is the raw score of the whole game."""
    env = make_actor_env("ALE/SpaceInvaders-v5", 1, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    clipped, terminations, steps, seen = 0.0, 0, 0, set()
    while steps < 5000:
        step = env.step(_random_actions(env, rng))
        steps += 1
        clipped += float(step.reward[0])
        seen |= set(step.reward.tolist())
        terminations += int(step.terminated[0])
        if step.episodes:
            break
    assert seen <= {-1.0, 0.0, 1.0} and clipped > 0
    assert terminations == 3  # one training episode per life ...
    [episode] = step.episodes  # ... but one reported game
    assert episode["return"] >= 5 * clipped and episode["return"] % 5 == 0  # raw points
    # agent steps, plus the NOOP that starts each later life
    assert steps <= episode["length"] <= steps + 2
    env.close()


def test_evaluation_env_plays_whole_games_with_raw_rewards():
    env = make_env("ALE/SpaceInvaders-v5")
    obs, _ = env.reset(seed=1)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    rewards, done = set(), False
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.add(float(reward))
        done = terminated or truncated
    assert max(rewards) >= 5  # unclipped
    assert env.unwrapped.ale.lives() == 0  # no episode end before the game is over
    assert info["raw_episode"]["r"] > 0
    env.close()


def test_env_kwargs_set_preprocessing_and_bad_values_raise():
    obs_space, _ = env_spaces("ALE/Breakout-v5", {"screen_size": 42, "frame_stack": 2,
                                                  "repeat_action_probability": 0.0})
    assert obs_space.shape == (42, 42, 2) and obs_space.dtype == np.uint8
    with pytest.raises(ValueError, match="frameskip"):
        atari.split_kwargs({"frameskip": 4})
    with pytest.raises(ValueError, match="frame_stack"):
        atari.split_kwargs({"frame_stack": 0})
    with pytest.raises(ValueError, match="NoSuchGame"):
        check_env_name("ALE/NoSuchGame-v5")


SMALL_PONG = """
total_env_steps = 512
num_actors = 2
envs_per_actor = 2
ring_size = 2
segment_length = 16
batch_segments = 4
log_interval_s = 0.5

[ppo]
num_epochs = 1
num_minibatches = 2
hidden_sizes = []
activation = "relu"
learning_rate = 2.5e-4

[env_kwargs]
screen_size = 36   # the smallest frame the Nature CNN takes: a quick test
frame_stack = 2
"""


def test_pong_trains_through_real_actor_processes(tmp_path):
    toml = tmp_path / "pong.toml"
    toml.write_text(SMALL_PONG)
    logdir = str(tmp_path / "run")
    cfg = load_config(["--env=ALE/Pong-v5", f"--config={toml}", f"--logdir={logdir}"])
    record = train(cfg)
    assert record["env_steps"] >= 512  # frames flowed from the actor processes
    assert record["policy_version"] >= 2  # the learner updated and published parameters
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert any("loss/total" in r for r in records)
    assert psutil.Process().children(recursive=True) == []  # every actor exited
