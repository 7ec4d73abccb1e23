"""Rules of hide-and-seek checked on hand-built arenas (``reset(options={"layout": ...})``).

Conventions: a 6 m floor centred on the origin, one hider and one seeker; poses are
(x, y, yaw); action bins 0..10 with 5 = no force; ``NOOP`` does nothing.
"""

import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import Layout, make_env, outer_walls

NOOP = [5, 5, 5, 0, 0]
PUSH_X = [10, 5, 5, 0, 0]  # full force along +x
CUBE = [0.5, 0.5, 0.5]
# Feature columns (see observations.py).
LOCKED_OWN, LOCKED_OTHER, HELD_SELF = 14, 15, 16


def arena(env, hider, seeker, boxes=(), ramps=(), walls=()):
    layout = Layout(
        outer_walls(env.config) + list(walls), [hider], [seeker], list(boxes), [CUBE] * len(boxes), list(ramps)
    )
    obs, _ = env.reset(options={"layout": layout})
    return obs


def hs_env(prep_fraction=0.0, horizon=40, **kw):
    return make_env("quadrant", n_hiders=(1, 2), n_seekers=(1, 2), horizon=horizon, prep_fraction=prep_fraction, **kw)


def seeker_sees_hider(obs):
    return obs["seeker_0"]["agents_mask"][0] == 1.0  # the seeker's first other agent is hider_0


def test_hider_behind_wall_is_unseen():
    env = hs_env()
    wall = (0.0, 0.0, 0.05, 1.0, 0.5)  # (cx, cy, half_x, half_y, height) between them
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0), walls=[wall])
    assert not seeker_sees_hider(obs)
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": 1.0, "seeker_0": -1.0}
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0))  # same without the wall
    assert seeker_sees_hider(obs)
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": -1.0, "seeker_0": 1.0}


def test_box_blocks_sight():
    env = hs_env()
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0), boxes=[(0.0, 0.0, 0.0)])
    assert not seeker_sees_hider(obs)
    assert obs["seeker_0"]["boxes_mask"][0] == 1.0  # ...but the box itself is seen


@pytest.mark.parametrize("yaw_deg,seen", [(0, True), (60, True), (75, False), (180, False)])
def test_vision_cone_is_135_degrees(yaw_deg, seen):
    env = hs_env()
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, np.deg2rad(yaw_deg)))
    assert seeker_sees_hider(obs) == seen
    _, rew, *_ = env.step({})
    assert rew["hider_0"] == (-1.0 if seen else 1.0)


def test_no_reward_during_preparation():
    env = hs_env(prep_fraction=0.5, horizon=8)  # 4 preparation steps
    arena(env, hider=(1.0, 0.0, 0.0), seeker=(-1.0, 0.0, 0.0))  # in plain sight
    rewards = [env.step({})[1] for _ in range(6)]
    assert all(r == {"hider_0": 0.0, "seeker_0": 0.0} for r in rewards[:4])
    assert rewards[4] == {"hider_0": -1.0, "seeker_0": 1.0}


def test_seekers_cannot_act_during_preparation():
    env_a, env_b = hs_env(prep_fraction=0.5, horizon=10), hs_env(prep_fraction=0.5, horizon=10)
    start = dict(hider=(1.0, 1.0, 0.0), seeker=(-1.0, 0.0, 0.0), boxes=[(-0.45, 0.0, 0.0)])
    oa, ob = arena(env_a, **start), arena(env_b, **start)
    seeker_actions = [[10, 10, 0, 1, 1], [0, 10, 10, 1, 0], [10, 0, 10, 1, 1], [10, 10, 10, 0, 1], [0, 0, 0, 1, 1]]
    for act in seeker_actions:  # five steps of the five-step preparation phase
        oa, ra, *_ = env_a.step({"hider_0": [6, 5, 5, 0, 0], "seeker_0": act})
        ob, rb, *_ = env_b.step({"hider_0": [6, 5, 5, 0, 0]})
        assert ra == rb
        for agent in oa:
            for k in oa[agent]:
                np.testing.assert_array_equal(oa[agent][k], ob[agent][k])
    assert oa["seeker_0"]["boxes"][0, [LOCKED_OWN, HELD_SELF]].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(oa["seeker_0"]["self"][:2], [-1.0, 0.0], atol=1e-6)
    oa, *_ = env_a.step({"seeker_0": PUSH_X})  # after preparation the seeker moves
    assert oa["seeker_0"]["self"][0] > -1.0 + 1e-3


def test_boundary_penalty():
    env = hs_env(prep_fraction=0.5, horizon=8)
    half = env.config.floor_size / 2
    arena(env, hider=(half + 1.0, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi))  # hider beyond the outer wall
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": -10.0, "seeker_0": 0.0}


def test_object_boundary_penalty_is_optional():
    env = hs_env(prep_fraction=0.5, object_boundary_penalty=10.0)
    arena(env, hider=(0.0, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi), boxes=[(4.0, 0.0, 0.0)])
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": -10.0, "seeker_0": -10.0}


@pytest.mark.parametrize(
    "box_x,yaw,grabbed",
    [
        (0.15 + 0.25 + 0.2, 0.0, True),  # surface gap 0.2 m, in view: grabbed
        (0.15 + 0.25 + 0.35, 0.0, False),  # gap 0.35 m: out of reach
        (0.15 + 0.25 + 0.1, np.pi, False),  # within reach but behind the agent: not visible
    ],
)
def test_grab_needs_reach_and_sight(box_x, yaw, grabbed):
    env = hs_env()
    obs = arena(env, hider=(0.0, 0.0, yaw), seeker=(-2.0, -2.0, np.pi), boxes=[(box_x, 0.0, 0.0)])
    assert obs["hider_0"]["boxes_mask"][0] == float(yaw == 0.0)
    obs, *_ = env.step({"hider_0": [5, 5, 5, 1, 0]})
    assert obs["hider_0"]["boxes"][0, HELD_SELF] == float(grabbed)


def test_grabbed_box_follows_and_release():
    env = hs_env()
    arena(env, hider=(0.0, 0.0, 0.0), seeker=(-2.0, -2.0, np.pi), boxes=[(0.5, 0.0, 0.0)])
    for _ in range(10):
        obs, *_ = env.step({"hider_0": [0, 5, 5, 1, 0]})  # pull back along -x while holding
    assert obs["hider_0"]["boxes"][0, 0] < 0.0  # the box came along
    obs, *_ = env.step({"hider_0": NOOP})
    assert obs["hider_0"]["boxes"][0, HELD_SELF] == 0.0


def test_locked_box_does_not_move_when_pushed():
    env = hs_env()
    arena(env, hider=(-1.0, 0.0, 0.0), seeker=(2.0, 2.0, np.pi), boxes=[(-0.55, 0.0, 0.0)])
    obs, *_ = env.step({"hider_0": [5, 5, 5, 0, 1]})
    assert obs["hider_0"]["boxes"][0, LOCKED_OWN] == 1.0
    for _ in range(20):
        obs, *_ = env.step({"hider_0": PUSH_X})
    np.testing.assert_allclose(obs["hider_0"]["boxes"][0, :2], [-0.55, 0.0], atol=5e-3)
    # The unlocked box is pushed away by the same action.
    arena(env, hider=(-1.0, 0.0, 0.0), seeker=(2.0, 2.0, np.pi), boxes=[(-0.55, 0.0, 0.0)])
    for _ in range(20):
        obs, *_ = env.step({"hider_0": PUSH_X})
    assert obs["hider_0"]["boxes"][0, 0] > 0.0


def test_only_the_locking_team_can_unlock():
    env = hs_env()
    # Hider left of the box, seeker right of it, both facing it and within reach.
    arena(env, hider=(-0.45, 0.0, 0.0), seeker=(0.45, 0.0, np.pi), boxes=[(0.0, 0.0, 0.0)])
    obs, *_ = env.step({"hider_0": [5, 5, 5, 0, 1]})
    assert obs["seeker_0"]["boxes"][0, LOCKED_OTHER] == 1.0
    for lock in (1, 0, 1):  # the seeker presses lock twice (two rising edges) and tries to grab
        obs, *_ = env.step({"hider_0": NOOP, "seeker_0": [5, 5, 5, 1, lock]})
    assert obs["seeker_0"]["boxes"][0, LOCKED_OTHER] == 1.0
    assert obs["seeker_0"]["boxes"][0, HELD_SELF] == 0.0  # locked objects cannot be grabbed
    obs, *_ = env.step({"hider_0": [5, 5, 5, 0, 1], "seeker_0": NOOP})  # the hider unlocks it
    assert obs["hider_0"]["boxes"][0, LOCKED_OWN] == 0.0
    assert obs["seeker_0"]["boxes"][0, LOCKED_OTHER] == 0.0


def test_lidar_ranges():
    env = hs_env()
    obs = arena(env, hider=(0.0, 0.0, 0.0), seeker=(-2.0, -2.0, np.pi), boxes=[(1.0, 0.0, 0.0)])
    lidar = obs["hider_0"]["lidar"]
    assert lidar[0] == pytest.approx(1.0 - 0.25, abs=1e-3)  # first ray along the heading hits the box face
    assert lidar[15] == pytest.approx(3.0, abs=1e-3)  # backwards: the outer wall at x = -3
    assert np.all((lidar > 0) & (lidar <= env.config.lidar_range))
