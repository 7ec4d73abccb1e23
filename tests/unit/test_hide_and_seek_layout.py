"""Layouts, spawns and physics scale as released, over many seeded resets."""

import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import Layout, generate_layout, make_config, make_env, outer_walls
from jaxsrl.envs.hide_and_seek.layout import room_box


def layouts(variant, n, **kw):
    cfg = make_config(variant, **kw)
    return cfg, [generate_layout(cfg, np.random.default_rng(seed)) for seed in range(n)]


def _inside(cfg, xy):
    x0, y0 = room_box(cfg)
    return (xy[:, 0] > x0) & (xy[:, 1] > y0)


def test_quadrant_boxes_inside_seekers_outside_hiders_anywhere_yaws_zero():
    cfg, lays = layouts("quadrant", 60)
    boxes = np.concatenate([lay.boxes for lay in lays])
    seekers = np.concatenate([lay.seekers for lay in lays])
    hiders = np.concatenate([lay.hiders for lay in lays])
    assert _inside(cfg, boxes[:, :2] - 0.25).all()  # the whole box is in the room
    assert not _inside(cfg, seekers[:, :2] + 0.15).any()  # the whole seeker is out of it
    assert 0.1 < _inside(cfg, hiders[:, :2]).mean() < 0.45  # uniform: about a quarter
    for lay in lays:
        assert np.all(np.concatenate([lay.hiders, lay.seekers, lay.boxes, lay.ramps])[:, 2] == 0.0)


def _door_gaps(lay):
    """Gaps (m) along the two room walls (vertical at x = 0.1, horizontal at y = -0.1)."""
    inner = lay.walls[lay.walls[:, 4] < 1.0]
    gaps = []
    for along, fixed in ((1, 0), (0, 1)):
        segs = inner[np.isclose(inner[:, fixed], 0.1 if along == 1 else -0.1)]
        segs = segs[np.argsort(segs[:, along])]
        ends = [(c - h, c + h) for c, h in zip(segs[:, along], segs[:, 2 + along])]
        gaps += [round(b[0] - a[1], 6) for a, b in zip(ends, ends[1:])]
        lo = 0.15 if along == 0 else -0.05  # a door at the room corner leaves one segment
        gaps += [round(ends[0][0] - lo, 6)] if ends[0][0] - lo > 0.3 else []
        gaps += [round(2.85 - ends[-1][1], 6)] if 2.85 - ends[-1][1] > 0.3 else []
    return gaps


def test_quadrant_doors_are_0_7_m_and_half_the_rooms_have_two():
    cfg, lays = layouts("quadrant", 200)
    counts = []
    for lay in lays:
        gaps = _door_gaps(lay)
        # 0.7 m between segments; 0.6 m where the door's dropped 1-cell stub meets a wall, as released
        assert gaps and all(g == pytest.approx(0.7) or g == pytest.approx(0.6) for g in gaps), gaps
        counts.append(len(gaps))
    assert set(counts) <= {1, 2}
    assert 0.38 < np.mean(np.array(counts) == 2) < 0.62  # old: P(2 doors) = 0.24


def test_outer_walls_are_4_m_high_and_bounds_just_outside():
    cfg = make_config("quadrant")
    walls = np.array(outer_walls(cfg))
    assert np.all(walls[:, 4] == 4.0)
    inner_face = np.abs(walls[:, :2]).max(1) - 0.05
    np.testing.assert_allclose(inner_face, 2.85)
    assert cfg.bounds_size / 2 == pytest.approx(2.9)


def test_full_game_counts_elongated_boxes_and_outer_walls():
    cfg, lays = layouts("full", 40)
    hiders = {len(lay.hiders) for lay in lays}
    seekers = {len(lay.seekers) for lay in lays}
    assert hiders == {1, 2, 3} and seekers == {1, 2, 3}
    with_outer = 0
    for lay in lays:
        assert 3 <= len(lay.boxes) <= 9
        long = lay.box_sizes[lay.box_sizes.max(1) > 1.0]
        assert len(long) >= 3  # at least 3 elongated, axis-aligned along x or y
        assert all(sorted(s) == [0.15, 0.5, 1.65] for s in long.tolist())
        with_outer += int(np.any(lay.walls[:, 4] == 4.0))
        assert np.all(np.abs(lay.hiders[:, :2]) < 2.85)  # a 6 m spawn floor
    assert 0.25 < with_outer / len(lays) < 0.75  # outer walls with p = 0.5


def test_full_game_teammates_spawn_together():
    cfg, lays = layouts("full", 30, n_hiders=(3, 3), n_seekers=(3, 3))
    for lay in lays:
        for team in (lay.hiders, lay.seekers):
            assert np.all(np.abs(team[1:, :2] - team[0, :2]) <= 0.6 + 1e-9)  # ceil(0.5 / 0.2) cells


def _run(env, hider, boxes, steps, action):
    layout = Layout(outer_walls(env.config), [hider], [(-2.5, -2.5, 0.0)], boxes, [[0.5] * 3] * len(boxes), [])
    env.reset(options={"layout": layout})
    for _ in range(steps):
        env.step({"hider_0": action})
    return env.data.qvel.reshape(-1, 4)


def test_top_speed_and_box_push_match_the_released_physics():
    env = make_env("quadrant", n_hiders=(1, 2), n_seekers=(1, 2), prep_fraction=0.0)
    v = _run(env, (-2.5, 0.0, 0.0), [], 8, [10, 5, 5, 0, 0])
    assert 7.5 < v[0, 0] < 8.5  # (90 N - 0.2 * 1 kg * 50 m/s^2) / 10 N s/m = 8 m/s (old: 2.3)
    # Pushing with its front (pointing at +x; the arms lie within the sphere's reach there)
    front_x = -np.deg2rad(env.config.facing_offset_deg)
    v = _run(env, (-2.5, 0.0, front_x), [(-2.05, 0.0, 0.0)], 8, [10, 5, 5, 0, 0])
    assert 6.0 < v[2, 0] < 7.5  # agent and 1 kg box: (90 - 10 - 10) / 10 = 7 m/s


def test_arms_stick_out_sideways_and_push():
    """At yaw 0 the arms sit at x = -+0.13 (radius 0.05), reaching 0.18 m from the centre
    along x where the sphere reaches 0.15 m (particle_hinge.xml:15-16). Driven into a wall
    along +x, the leading arm hits first and turns the agent; pushing a box with one arm
    spins the box. Without arms neither turns."""
    assert make_config("quadrant").agent_arms and make_config("full").agent_arms  # on by default, as released
    for arms in (True, False):
        env = make_env("quadrant", n_hiders=(1, 2), n_seekers=(1, 2), prep_fraction=0.0, agent_arms=arms)
        _run(env, (2.0, 0.0, 0.0), [], 6, [10, 5, 5, 0, 0])
        assert (abs(env.data.qpos[3]) > 0.05) == arms  # agent yaw after hitting the wall
        v = _run(env, (-2.5, 0.0, 0.0), [(-2.05, 0.0, 0.0)], 8, [10, 5, 5, 0, 0])
        assert (abs(v[2, 3]) > 0.5) == arms  # box spin (rad/s)
