"""Rules of hide-and-seek checked on hand-built arenas (``reset(options={"layout": ...})``):
vision, reward, preparation, out of bounds, lidar. Grab and lock: test_hide_and_seek_manipulation.py.

Conventions: a 6 m floor centred on the origin (outer walls' inner faces at +-2.85 m),
one hider and one seeker; poses are (x, y, facing), facing the direction of the agent's
front (its joint yaw is facing - facing_offset_deg, see config.py); action bins 0..10
with 5 = no force.
"""

import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import Layout, make_env, outer_walls

NOOP = [5, 5, 5, 0, 0]
PUSH_X = [10, 5, 5, 0, 0]  # full force along +x
CUBE = [0.5, 0.5, 0.5]


def facing(pose, env):
    """Layout pose (x, y, joint yaw) of an agent whose front points at ``pose[2]``."""
    return (pose[0], pose[1], pose[2] - np.deg2rad(env.config.facing_offset_deg))


def arena(env, hider, seeker, boxes=(), ramps=(), walls=None):
    walls = outer_walls(env.config) if walls is None else walls
    layout = Layout(list(walls), [facing(hider, env)], [facing(seeker, env)], list(boxes), [CUBE] * len(boxes), list(ramps))
    obs, _ = env.reset(options={"layout": layout})
    return obs


def hs_env(prep_fraction=0.0, horizon=40, variant="quadrant", **kw):
    return make_env(variant, n_hiders=(1, 2), n_seekers=(1, 2), horizon=horizon, prep_fraction=prep_fraction, **kw)


def seeker_sees_hider(obs):
    return obs["seeker_0"]["agents_mask"][0] == 1.0  # the seeker's first other agent is hider_0


WALL = (0.0, 0.0, 0.05, 1.0, 0.5)  # (cx, cy, half_x, half_y, height) between the two


def test_hider_behind_wall_is_unseen():
    env = hs_env()
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0), walls=outer_walls(env.config) + [WALL])
    assert not seeker_sees_hider(obs)
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": 1.0, "seeker_0": -1.0}
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0))  # same without the wall
    assert seeker_sees_hider(obs)
    _, rew, *_ = env.step({})
    assert rew == {"hider_0": -1.0, "seeker_0": 1.0}


def test_walls_blocking_sight_is_a_switch():
    env = hs_env(rays_hit_walls=False)  # the released ray call's flg_static=0, read literally
    obs = arena(env, hider=(2.0, 0.0, 0.0), seeker=(-2.0, 0.0, 0.0), walls=outer_walls(env.config) + [WALL])
    assert seeker_sees_hider(obs)


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


def test_prep_timer_in_self_and_in_other_agents_rows():
    env = hs_env(prep_fraction=0.5, horizon=8)
    arena(env, hider=(1.0, 0.0, 0.0), seeker=(-1.0, 0.0, 0.0))
    obs, *_ = env.step({})
    assert obs["hider_0"]["self"][9] == pytest.approx(0.25, abs=1e-4)  # min(1, t / (4 + 1e-5))
    assert obs["seeker_0"]["agents"][0, 9] == pytest.approx(0.25, abs=1e-4)


def test_seekers_cannot_act_during_preparation():
    env_a, env_b = hs_env(prep_fraction=0.5, horizon=10), hs_env(prep_fraction=0.5, horizon=10)
    start = dict(hider=(1.0, 1.0, 0.0), seeker=(-1.0, 0.0, 0.0), boxes=[(-0.6, 0.0, 0.0)])
    oa, ob = arena(env_a, **start), arena(env_b, **start)
    seeker_actions = [[10, 10, 0, 1, 1], [0, 10, 10, 1, 0], [10, 0, 10, 1, 1], [10, 10, 10, 0, 1], [0, 0, 0, 1, 1]]
    for act in seeker_actions:  # five steps of the five-step preparation phase
        oa, ra, *_ = env_a.step({"hider_0": [6, 5, 5, 0, 0], "seeker_0": act})
        ob, rb, *_ = env_b.step({"hider_0": [6, 5, 5, 0, 0]})
        assert ra == rb
        for agent in oa:
            for k in oa[agent]:
                np.testing.assert_array_equal(oa[agent][k], ob[agent][k])
    assert env_a.held.tolist() == [-1, -1] and env_a.lock_team.tolist() == [-1]
    np.testing.assert_allclose(oa["seeker_0"]["self"][:2], [-1.0, 0.0], atol=1e-6)
    oa, *_ = env_a.step({"seeker_0": [10, 5, 5, 0, 0]})  # after preparation the seeker moves
    assert oa["seeker_0"]["self"][0] > -1.0 + 1e-3


def test_out_of_bounds_replaces_the_reward_after_preparation_only():
    env = hs_env(prep_fraction=0.5, horizon=4)  # 2 preparation steps
    arena(env, hider=(3.5, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi))  # hider beyond the outer wall, unseen
    rewards = [env.step({})[1] for _ in range(3)]
    assert rewards[0] == rewards[1] == {"hider_0": 0.0, "seeker_0": 0.0}  # zero in preparation
    assert rewards[2] == {"hider_0": -10.0, "seeker_0": -1.0}  # -10, not +1 - 10
    arena(env, hider=(2.7, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi))  # inside [-2.9, 2.9]^2
    assert [env.step({})[1] for _ in range(3)][2] == {"hider_0": 1.0, "seeker_0": -1.0}


@pytest.mark.parametrize("variant,penalised", [("quadrant", True), ("full", False)])
def test_object_out_of_bounds_penalises_everyone_in_the_quadrant_game(variant, penalised):
    env = hs_env(prep_fraction=0.5, horizon=4, variant=variant)
    box = (3.5, 0.0, 0.0) if variant == "quadrant" else (9.5, 0.0, 0.0)  # bounds: 5.8 / 18 m squares
    arena(env, hider=(0.0, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi), boxes=[box], walls=[])
    rewards = [env.step({})[1] for _ in range(3)]
    assert rewards[0] == {"hider_0": 0.0, "seeker_0": 0.0}
    assert rewards[2] == ({"hider_0": -10.0, "seeker_0": -10.0} if penalised else {"hider_0": 1.0, "seeker_0": -1.0})


def test_full_bounds_are_an_18_m_square():
    env = hs_env(prep_fraction=0.0, horizon=4, variant="full")
    arena(env, hider=(8.5, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi), walls=[])
    assert env.step({})[1]["hider_0"] == 1.0
    arena(env, hider=(9.5, 0.0, 0.0), seeker=(-1.0, 0.0, np.pi), walls=[])
    assert env.step({})[1]["hider_0"] == -10.0


def test_lidar_is_in_the_world_frame_after_a_turn():
    env = hs_env()
    obs = arena(env, hider=(0.0, 0.0, np.pi / 2), seeker=(-2.0, -2.0, np.pi), boxes=[(1.0, 0.0, 0.0)])
    lidar = obs["hider_0"]["lidar"]
    assert lidar[0] == pytest.approx(1.0 - 0.25, abs=1e-3)  # ray 0 along world +x hits the box face
    assert lidar[15] == pytest.approx(2.85, abs=1e-3)  # along -x: the outer wall's inner face
    assert lidar[7] == pytest.approx(2.85 / np.sin(np.deg2rad(84)), abs=1e-3)  # 84 deg: near +y


def test_lidar_reports_hits_beyond_its_range():
    env = hs_env()
    obs = arena(env, hider=(-2.5, 0.0, 0.0), seeker=(-2.5, 3.0, np.pi), boxes=[(5.0, 0.0, 0.0)], walls=[])
    lidar = obs["hider_0"]["lidar"]
    assert lidar[0] == pytest.approx(7.5 - 0.25, abs=1e-3)  # distance to the first hit, not capped
    assert lidar[15] == 6.0  # nothing hit: lidar_range


def test_agents_face_the_room_side_at_yaw_zero():
    """The released front is yaw - 90 degrees (mae:modules/agents.py:83), the original's -y,
    where its quadrant room lies; our frame mirrors y, so at the initial yaw 0 an agent looks
    along +y: a box at +y is seen and one at -y or at +x is not."""
    env = hs_env()
    for other, seen in (((0.0, -1.5, 0.0), 0.0), ((1.5, 0.0, 0.0), 0.0)):
        boxes = [(0.0, 1.5, 0.0), other]
        layout = Layout(outer_walls(env.config), [(0.0, 0.0, 0.0)], [(-2.5, -2.5, 0.0)], boxes, [CUBE] * 2, [])
        obs, _ = env.reset(options={"layout": layout})
        assert obs["hider_0"]["boxes_mask"][:2].tolist() == [1.0, seen]


def test_prep_statistics_snapshot_is_3d_and_taken_after_step_33():
    """As released (mae:hide_and_seek.py:60-78): the "prep" statistics are taken after the
    first step at which min(1, t / (32 + 1e-5)) == 1.0, i.e. step 33, and movement is the
    3-D norm. A push in step 33 counts as preparation movement (it would not at step 32)."""
    env = hs_env(prep_fraction=0.4, horizon=80)
    arena(env, hider=(-0.9, 0.0, 0.0), seeker=(-2.5, 2.5, 0.0), boxes=[(-0.5, 0.0, 0.0)])
    flags = []
    for t in range(1, 81):
        _, _, _, _, info = env.step({"hider_0": PUSH_X if t == 33 else NOOP})
        flags.append(info["hider_0"]["in_prep_phase"])
        if t == 33:
            moved = float(np.linalg.norm(env.data.qpos[8:11] - [-0.5, 0.0, 0.25]))
    assert flags == [True] * 31 + [False] * 49  # the next step is in preparation
    stats = info["hider_0"]["episode_stats"]
    assert moved > 0.01
    assert stats["box_move_prep_max"] == pytest.approx(moved, abs=1e-9)


def test_statistics_movement_is_the_3d_norm():
    from jaxsrl.envs.hide_and_seek.scene import SceneIndex
    from jaxsrl.envs.hide_and_seek.stats import EpisodeStats

    idx = SceneIndex(1, 1, 1, 0, np.arange(3), np.arange(3), 0)
    q0 = np.zeros((3, 4))
    stats = EpisodeStats(idx, 0, q0, np.array([0, 1]))
    q1 = q0.copy()
    q1[2, :3] = [0.3, 0.0, 0.4]  # the box moved 0.3 in x and rose 0.4: 0.5 m (x-y alone: 0.3)
    lock = np.full(1, -1)
    assert stats.snapshot_step == 1  # prep_steps 0: the snapshot follows the first step
    stats.snapshot(q1, lock)
    out = stats.summary(q1, lock, np.zeros(2, np.int64))
    assert out["box_move_prep_max"] == pytest.approx(0.5)
    assert out["box_move_end_mean"] == pytest.approx(0.5)
