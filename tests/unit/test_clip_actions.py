"""``--clip_actions``: Box actions reach the environment clipped (default) or raw."""

import gymnasium
import numpy as np

from jaxsrl.envs.gym_vector import GymVectorEnv
from jaxsrl.tools.evaluation import _to_env_action
from jaxsrl.workers.actor.spec import ActorSpec


class _Recorder(gymnasium.Env):
    """Records every action it is stepped with."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (2,))

    def __init__(self):
        self.seen = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.seen.append(np.array(action))
        return np.zeros(1, np.float32), -float(np.sum(np.square(action))), False, False, {}


def test_vector_env_clips_box_actions_only_when_asked():
    action = np.array([[3.0, -0.5]], np.float32)
    for clip, expected in ((True, [1.0, -0.5]), (False, [3.0, -0.5])):
        group = GymVectorEnv("unused", 1, 0, env_fn=_Recorder, clip_actions=clip)
        group.reset()
        result = group.step(action)
        np.testing.assert_array_equal(group.envs[0].seen[-1], expected)
        # The env's control cost sees what it was given: 1.25 clipped, 9.25 raw.
        np.testing.assert_allclose(result.reward, [-np.sum(np.square(expected))])


def test_evaluation_sends_what_training_sent():
    space = _Recorder.action_space
    np.testing.assert_array_equal(_to_env_action(np.array([3.0, -2.0]), space), [1.0, -1.0])
    np.testing.assert_array_equal(_to_env_action(np.array([3.0, -2.0]), space, clip=False),
                                  [3.0, -2.0])


def test_actor_spec_carries_the_switch():
    base = {"actor_id": 0, "run_id": 0, "env": "HalfCheetah-v5", "envs_per_group": 1,
            "ring_size": 1, "segment_length": 4, "seed": 0,
            "streams": [{"policy": "default", "inference_addresses": ["tcp://x:1"],
                         "sample_address": "tcp://x:2"}]}
    assert ActorSpec.from_dict(base).clip_actions is True
    spec = ActorSpec.from_dict({**base, "clip_actions": False})
    assert spec.clip_actions is False
    assert ActorSpec.from_dict(spec.to_dict()).clip_actions is False
