"""Grab and lock as released (mae:wrappers/manipulation.py), on hand-built arenas.

Agent poses are (x, y, facing): the agent's front points at ``facing`` (its joint yaw is
facing - facing_offset_deg, see config.py). Agents face +x unless stated; a 0.5 m cube at x = c is at a centre-to-surface
distance of c - 0.25 from an agent at the origin. ``env.held`` / ``env.lock_team``
read the state; box rows end with the lock flags (you_locked, team_locked, obj_locked).
"""

import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import Layout, make_env, outer_walls

NOOP = [5, 5, 5, 0, 0]
GRAB, LOCK = [5, 5, 5, 1, 0], [5, 5, 5, 0, 1]
CUBE = [0.5, 0.5, 0.5]


def setup(hiders, seekers, boxes=(), ramps=(), variant="quadrant", seed=None):
    env = make_env(variant, n_hiders=(1, 2), n_seekers=(1, 2), horizon=60, prep_fraction=0.0)
    if seed is not None:
        env.reset(seed=seed)
    off = np.deg2rad(env.config.facing_offset_deg)
    hiders, seekers = ([(x, y, f - off) for x, y, f in team] for team in (hiders, seekers))
    layout = Layout(outer_walls(env.config), hiders, seekers, boxes, [CUBE] * len(boxes), ramps)
    obs, _ = env.reset(options={"layout": layout})
    return env, obs


@pytest.mark.parametrize(
    "box_x,yaw,grabbed",
    [
        (0.25 + 0.2, 0.0, True),  # centre -> surface 0.2 m, in view: grabbed
        (0.25 + 0.3, 0.0, False),  # 0.3 m: out of reach (surface to surface it is only 0.15 m)
        (0.25 + 0.1, np.pi, False),  # within reach but behind the agent: not visible
    ],
)
def test_grab_reach_is_centre_to_cuboid_surface_and_needs_sight(box_x, yaw, grabbed):
    env, obs = setup([(0.0, 0.0, yaw)], [(-2.0, -2.0, np.pi)], boxes=[(box_x, 0.0, 0.0)])
    assert obs["hider_0"]["boxes_mask"][0] == float(yaw == 0.0)
    env.step({"hider_0": GRAB})
    assert env.held[0] == (0 if grabbed else -1)


def test_grabbed_box_follows_and_release():
    env, _ = setup([(0.0, 0.0, 0.0)], [(-2.0, -2.0, np.pi)], boxes=[(0.45, 0.0, 0.0)])
    for _ in range(4):
        obs, *_ = env.step({"hider_0": [0, 5, 5, 1, 0]})  # pull back along -x while holding
    assert obs["hider_0"]["boxes"][0, 0] < 0.0  # the box came along
    env.step({"hider_0": NOOP})
    assert env.held[0] == -1


def test_grab_drops_when_the_object_leaves_view():
    # Box at 60 deg (inside the 67.5 deg half-cone); spinning at full torque the held box
    # lags until it leaves the cone, and the grab is re-checked every step (the old latch kept it).
    b = np.deg2rad(60)
    env, _ = setup([(0.0, 0.0, 0.0)], [(-2.5, -2.5, np.pi)], boxes=[(0.42 * np.cos(b), 0.42 * np.sin(b), 0.0)])
    env.step({"hider_0": GRAB})
    assert env.held[0] == 0
    held = []
    for _ in range(5):
        obs, *_ = env.step({"hider_0": [5, 5, 0, 1, 0]})
        held.append(int(env.held[0]))
    assert held[-1] == -1 and obs["hider_0"]["boxes_mask"][0] == 0.0


def test_grab_switches_to_the_closest_object():
    env, _ = setup([(0.0, 0.0, 0.0)], [(-2.5, -2.5, np.pi)], boxes=[(0.5, 0.3, 0.0), (0.48, -0.3, 0.0)])
    env.step({"hider_0": GRAB})
    assert env.held[0] == 1  # 0.23 m vs 0.25 m: the closer one
    env, _ = setup([(0.0, 0.0, 0.0)], [(-2.5, -2.5, np.pi)], boxes=[(0.47, 0.3, 0.0), (0.48, -0.3, 0.0)])
    env.step({"hider_0": GRAB})
    assert env.held[0] == 0


def test_lock_is_held_while_pressed_and_released_without_press():
    env, _ = setup([(-0.45, 0.0, 0.0)], [(2.0, 2.0, np.pi)], boxes=[(0.0, 0.0, 0.0)])
    for _ in range(3):
        obs, *_ = env.step({"hider_0": LOCK})
        assert env.lock_team.tolist() == [0]
    assert obs["hider_0"]["boxes"][0, 9:12].tolist() == [1.0, 1.0, 1.0]
    obs, *_ = env.step({"hider_0": NOOP})  # in reach, seeing it, not pressing: unlocks (old: toggle kept it)
    assert env.lock_team.tolist() == [-1]
    assert obs["hider_0"]["boxes"][0, 9:12].tolist() == [0.0, 0.0, 0.0]


def test_lock_stays_when_the_locker_walks_away_and_a_teammate_can_unlock():
    env, _ = setup([(-0.45, 0.0, 0.0), (-2.0, 1.0, 0.0)], [(2.5, 2.5, np.pi)], boxes=[(0.0, 0.0, 0.0)])
    env.step({"hider_0": LOCK})
    for _ in range(2):  # hider_0 backs off still pressing, then lets go out of reach
        env.step({"hider_0": [0, 5, 5, 0, 1]})
    for _ in range(3):  # nobody of the team is in reach to decide: the lock holds
        obs, *_ = env.step({"hider_0": NOOP})
    assert env.lock_team.tolist() == [0]
    assert obs["hider_1"]["boxes"][0, 9:12].tolist() == [0.0, 1.0, 1.0]  # team lock, not "you"
    env, _ = setup([(-0.45, 0.0, 0.0), (0.0, -0.45, np.pi / 2)], [(2.5, 2.5, np.pi)], boxes=[(0.0, 0.0, 0.0)])
    env.step({"hider_0": LOCK, "hider_1": LOCK})
    env.step({"hider_0": LOCK, "hider_1": LOCK})
    assert env.lock_team.tolist() == [0]
    env.step({"hider_0": LOCK, "hider_1": NOOP})  # a teammate in reach not pressing unlocks it
    assert env.lock_team.tolist() == [-1]


def test_only_the_locking_team_can_unlock():
    env, _ = setup([(-0.45, 0.0, 0.0)], [(0.45, 0.0, np.pi)], boxes=[(0.0, 0.0, 0.0)])
    env.step({"hider_0": LOCK, "seeker_0": NOOP})  # agent 0's team decides a fresh box
    assert env.lock_team.tolist() == [0]
    env.step({"hider_0": [0, 5, 5, 0, 1], "seeker_0": NOOP})  # the hider backs off, pressing
    for act in (NOOP, LOCK, NOOP):  # the seeker, in reach and seeing it, cannot undo it
        env.step({"hider_0": NOOP, "seeker_0": act})
    assert env.lock_team.tolist() == [0]


def test_the_locker_is_drawn_among_the_pressers():
    teams = set()
    for seed in range(12):
        env, _ = setup([(-0.45, 0.0, 0.0)], [(0.45, 0.0, np.pi)], boxes=[(0.0, 0.0, 0.0)], seed=seed)
        env.step({"hider_0": LOCK, "seeker_0": LOCK})
        teams.add(int(env.lock_team[0]))
    assert teams == {0, 1}


def test_locked_objects_can_be_grabbed_and_do_not_move():
    env, _ = setup([(-0.45, 0.0, 0.0), (0.0, -0.45, np.pi / 2)], [(2.5, 2.5, np.pi)], boxes=[(0.0, 0.0, 0.0)])
    for _ in range(10):
        obs, *_ = env.step({"hider_0": [10, 5, 5, 0, 1], "hider_1": [5, 5, 5, 1, 1]})  # push it while locked
    assert env.lock_team.tolist() == [0] and env.held[1] == 0
    np.testing.assert_allclose(obs["hider_0"]["boxes"][0, :2], [0.0, 0.0], atol=5e-3)


@pytest.mark.parametrize("variant,lockable", [("quadrant", False), ("full", True)])
def test_ramps_lock_only_in_the_full_game(variant, lockable):
    env, _ = setup([(-0.4, 0.0, 0.0)], [(2.5, 2.5, np.pi)], ramps=[(0.0, 0.0, 0.0)], variant=variant)
    env.step({"hider_0": LOCK})
    assert env.lock_team.tolist() == ([0] if lockable else [-1])


def _scripted(physics_sleep):
    """Wait (the boxes fall asleep), push box 0, grab and pull it, push it into box 1 and on
    to the wall, lock box 0 and push it while locked, let go and walk away."""
    env = make_env("quadrant", n_hiders=(1, 2), n_seekers=(1, 2), horizon=60, prep_fraction=0.0,
                   physics_sleep=physics_sleep)
    off = np.deg2rad(env.config.facing_offset_deg)
    layout = Layout(outer_walls(env.config), [(-0.9, 0.0, -off)], [(-2.5, -2.5, np.pi - off)],
                    [(-0.45, 0.0, 0.0), (1.2, 0.0, 0.0)], [CUBE] * 2, [])
    env.reset(options={"layout": layout})
    asleep, locks = [], []
    script = [NOOP] * 3 + [[10, 5, 5, 0, 0]] * 3 + [[0, 5, 5, 1, 0]] * 3 + [[10, 5, 5, 0, 0]] * 6
    script += [[10, 5, 5, 0, 1]] * 4 + [[10, 5, 5, 1, 1]] * 3 + [[0, 5, 5, 0, 0]] * 4 + [NOOP] * 4
    for act in script:
        env.step({"hider_0": act})
        asleep.append(env.data.tree_asleep.copy())
        locks.append(env.lock_team.tolist())
    return env.data.qpos.copy(), np.array(asleep), locks


def test_sleeping_bodies_wake_on_push_grab_and_lock_and_the_dynamics_stay():
    """``physics_sleep`` freezes resting boxes (MuJoCo's sleeping islands) but a push, a grab
    and a locked object behave as without it: the same script ends within 2 mm (a box
    creeping at under 1e-3 m/s against a wall is frozen about 1 mm short)."""
    q_sleep, asleep, locks_sleep = _scripted(True)
    q_awake, never, locks_awake = _scripted(False)
    boxes = slice(2, 4)  # trees: hider, seeker, box 0, box 1
    assert np.all(asleep[2, boxes] >= 0)  # both boxes asleep before the push
    assert np.all(never < 0)
    assert locks_sleep == locks_awake and [0, -1] in locks_sleep  # box 0 was locked, then unlocked
    np.testing.assert_allclose(q_sleep, q_awake, atol=2e-3)
    assert abs(q_sleep[8] + 0.45) > 0.3  # box 0 did move


def test_reach_distance_matches_a_numpy_loop_reference():
    """``Manipulation.distances`` (rotation read from MuJoCo's xmat) against a plain loop of
    the released ``dist_pt_to_cuboid`` idea (mae:util/geometry.py:5-54): rotate the point
    into the box frame by -yaw, clamp to the half sizes, measure the rest."""
    import mujoco

    from jaxsrl.envs.hide_and_seek.manipulation import Manipulation
    from jaxsrl.envs.hide_and_seek.scene import compile_scene

    cfg = make_env("full").config
    rng = np.random.default_rng(0)
    sizes = [[1.65, 0.15, 0.5], [0.5, 0.5, 0.5], [0.15, 1.65, 0.5]]
    layout = Layout([], [(0.0, 0.0, 0.0), (1.0, 1.0, 0.0)], [(-1.0, 1.0, 0.0)],
                    [(0.5, -0.5, 0.0), (-1.0, -1.0, 0.0), (1.5, 0.0, 0.0)], sizes, [(0.0, 1.5, 0.0)])
    model, idx = compile_scene(cfg, layout)
    data = mujoco.MjData(model)
    q = data.qpos.reshape(-1, 4)
    q[:, :2] = rng.uniform(-2, 2, (len(q), 2))
    q[:, 2] = rng.uniform(0.0, 0.6, len(q))
    q[:, 3] = rng.uniform(-4, 4, len(q))
    mujoco.mj_kinematics(model, data)
    got = Manipulation(cfg, model, data, idx, np.array(sizes), rng).distances()
    half = np.array(sizes + [list(cfg.ramp_size)]) / 2
    dz = [0.0, 0.0, 0.0, cfg.ramp_size[2] / 2]  # a ramp's cuboid centre is half its height up
    want = np.zeros((3, 4))
    for i in range(3):
        for o in range(4):
            x, y, z = q[i, :3] - q[3 + o, :3] - [0.0, 0.0, dz[o]]
            c, s = np.cos(q[3 + o, 3]), np.sin(q[3 + o, 3])
            local = np.array([c * x + s * y, -s * x + c * y, z])
            gap = np.maximum(np.abs(local) - half[o], 0.0)
            want[i, o] = np.sqrt((gap**2).sum())
    assert want.min() == 0.0 or want.max() > 0.5  # a spread of distances
    np.testing.assert_allclose(got, want, atol=1e-9)


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_near_radius_bounds_the_reach(variant):
    """The prefilter grab and lock use to skip the exact distances: an object whose cuboid
    surface is within reach of an agent's centre always has its geom centre within
    ``near_radius`` of it (vision's centre distances). Agents are dropped at random around
    the objects, at every yaw, on the floor and raised; checked against the exact
    centre-to-cuboid distance. Caught: the half-diagonal term dropped from ``near_radius``,
    and ``near_radius`` 0.1 m smaller."""
    import mujoco

    from jaxsrl.envs.hide_and_seek import generate_layout, make_config
    from jaxsrl.envs.hide_and_seek.manipulation import Manipulation
    from jaxsrl.envs.hide_and_seek.scene import compile_scene
    from jaxsrl.envs.hide_and_seek.vision import Vision

    cfg = make_config(variant)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(4):
        layout = generate_layout(cfg, rng)
        model, idx = compile_scene(cfg, layout)
        data = mujoco.MjData(model)
        a, o = idx.n_agents, idx.n_objects
        q = data.qpos[: 4 * (a + o)].reshape(-1, 4)
        manip = Manipulation(cfg, model, data, idx, layout.box_sizes, rng)
        vision = Vision(cfg, model, idx)
        for _ in range(150):
            q[a:, :2] = rng.uniform(-2, 2, (o, 2))
            q[a:, 2] = rng.uniform(0, 0.6, o)
            q[a:, 3] = rng.uniform(-np.pi, np.pi, o)
            near = rng.integers(0, o, a)  # each agent next to one object
            q[:a, :2] = q[a + near, :2] + rng.uniform(-1.1, 1.1, (a, 2))
            q[:a, 2] = rng.uniform(0, 0.8, a)
            mujoco.mj_kinematics(model, data)
            vision.sense(data)
            dist = manip.distances()  # [A, O] exact
            centre = vision.centre_dist[:, a - 1 :]  # [A, O]
            in_reach = dist <= cfg.grab_reach
            assert np.all(centre[in_reach] <= np.broadcast_to(manip.near_radius, dist.shape)[in_reach])
            checked += np.count_nonzero(in_reach)
    assert checked > 200  # the random drops put many pairs in reach
