"""Hide-and-seek env: API conformance, spaces, determinism, episode end, layouts, rendering."""

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import parallel_api_test

from jaxsrl.envs.hide_and_seek import HideAndSeekConfig, HideAndSeekEnv, generate_layout, make_config, make_env
from jaxsrl.envs.hide_and_seek.layout import free_grid, is_connected


# The full game samples 1-3 agents per team, so some possible_agents sit out an episode.
@pytest.mark.filterwarnings("ignore:No agents present but not all possible_agents")
@pytest.mark.parametrize("variant,horizon", [("quadrant", 20), ("full", 10)])
def test_pettingzoo_parallel_api(variant, horizon):
    parallel_api_test(make_env(variant, horizon=horizon), num_cycles=2 * horizon)


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_spaces_shared_and_observations_inside(variant):
    env = make_env(variant, horizon=3)
    obs, infos = env.reset(seed=1)
    space = env.observation_space(env.possible_agents[0])
    assert isinstance(space, spaces.Dict)
    for agent in env.possible_agents:
        assert env.observation_space(agent) == space
        assert env.action_space(agent) == spaces.MultiDiscrete([11, 11, 11, 2, 2])
    for _ in range(3):
        for agent, o in obs.items():
            assert space.contains(o), agent
            assert all(v.dtype == np.float32 for v in o.values())
        obs, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
    cfg = env.config
    # As released: 10 per agent, boxes 9 (+3 size in full) + 3 lock flags, ramps 9 / 15.
    assert space["self"].shape == (10,)
    assert space["agents"].shape == (cfg.max_agents - 1, 10)
    assert space["boxes"].shape == (cfg.max_boxes, 12 if variant == "quadrant" else 15)
    assert space["ramps"].shape == (cfg.max_ramps, 9 if variant == "quadrant" else 15)
    assert space["lidar"].shape == (30,)


def test_team_flags():
    env = make_env("quadrant")
    obs, _ = env.reset(seed=0)
    assert env.team_of("hider_1") == "hider" and env.team_of("seeker_0") == "seeker"
    assert obs["hider_0"]["self"][8] == 1.0 and obs["seeker_1"]["self"][8] == 0.0  # the "hider" flag
    assert obs["hider_0"]["agents"][:, 8].tolist() == [1.0, 0.0, 0.0]  # hider_1, seeker_0, seeker_1


def _rollout(seed, n_steps, variant="quadrant"):
    env = make_env(variant, horizon=8)
    rng = np.random.default_rng(123)
    obs, _ = env.reset(seed=seed)
    trace = []
    for _ in range(n_steps):
        acts = {a: rng.integers(0, [11, 11, 11, 2, 2]) for a in env.possible_agents}
        obs, rew, _, trunc, _ = env.step({a: acts[a] for a in env.agents})
        trace.append((obs, rew))
        if not env.agents:
            obs, _ = env.reset()
    return trace


def test_same_seed_same_trajectory():
    a, b = _rollout(7, 20), _rollout(7, 20)  # crosses two resets
    for (oa, ra), (ob, rb) in zip(a, b):
        assert ra == rb
        for agent in oa:
            for k in oa[agent]:
                np.testing.assert_array_equal(oa[agent][k], ob[agent][k])
    c = _rollout(8, 1)
    assert any(not np.array_equal(c[0][0][ag]["self"], a[0][0][ag]["self"]) for ag in c[0][0])


def test_step_returns_new_objects_that_later_steps_leave_alone():
    # A caller may keep and edit what step and reset return: later steps must not change it
    # (no observation buffer reused across steps), and every info is a dict of its own.
    env = make_env("quadrant", horizon=5)
    rng = np.random.default_rng(4)
    obs, infos = env.reset(seed=2)
    kept = []
    for n in range(7):  # through the episode end and a reset
        infos["hider_0"]["mine"] = n  # a caller writing into one agent's info
        kept.append((n, obs, infos, {a: {k: v.copy() for k, v in o.items()} for a, o in obs.items()}))
        if env.agents:
            obs, _, _, _, infos = env.step({a: rng.integers(0, [11, 11, 11, 2, 2]) for a in env.agents})
        else:
            obs, infos = env.reset()
    for n, obs_then, infos_then, copies in kept:
        assert [(a, i["mine"]) for a, i in infos_then.items() if "mine" in i] == [("hider_0", n)]
        for a, o in obs_then.items():
            for k, v in o.items():
                np.testing.assert_array_equal(v, copies[a][k], err_msg=f"step {n}: {a} {k} changed later")
                assert not np.shares_memory(v, obs[a][k]), (n, a, k)
    # the observations differ from step to step (else the check above could not fail)
    assert not np.array_equal(kept[1][3]["hider_0"]["self"], kept[2][3]["hider_0"]["self"])


def test_truncation_and_episode_stats():
    env = make_env("quadrant", horizon=5)
    env.reset(seed=0)
    for t in range(5):
        _, rew, term, trunc, info = env.step({})
        assert not any(term.values())
        assert all(trunc.values()) == (t == 4)
    assert env.agents == []
    stats = info["hider_0"]["episode_stats"]
    assert stats["episode_length"] == 5.0
    for key in ("box_move_prep_mean", "ramp_move_end_max", "boxes_locked_hiders_end", "hider_seen_fraction"):
        assert isinstance(stats[key], float)
    with pytest.raises(RuntimeError):
        env.step({})


def test_config_errors_name_the_culprit():
    with pytest.raises(ValueError, match="bogus"):
        make_env("bogus")
    with pytest.raises(ValueError, match="n_hidders"):
        make_env("quadrant", n_hidders=(1, 1))
    assert make_config("full").horizon == 240
    assert HideAndSeekConfig().prep_steps == 32
    assert isinstance(HideAndSeekEnv(), HideAndSeekEnv)


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_layouts_valid_and_reachable(variant):
    cfg = make_config(variant)
    for seed in range(8):
        lay = generate_layout(cfg, np.random.default_rng(seed))
        free, _ = free_grid(cfg, lay.walls, cfg.agent_radius)
        assert is_connected(free)
        pts = np.concatenate([lay.hiders, lay.seekers, lay.boxes, lay.ramps])[:, :2]
        assert np.all(np.abs(pts) < cfg.floor_size / 2)
        r = cfg.agent_radius  # footprints (all yaws are 0): no two overlap
        half = np.concatenate([np.full((len(lay.hiders) + len(lay.seekers), 2), r), lay.box_sizes[:, :2] / 2,
                               np.tile(np.array(cfg.ramp_size[:2]) / 2, (len(lay.ramps), 1))])
        apart = np.abs(pts[:, None] - pts[None]) >= half[:, None] + half[None]  # [N, N, 2]
        assert np.all(apart.any(-1) | np.eye(len(pts), dtype=bool))
        assert cfg.n_hiders[0] <= len(lay.hiders) <= cfg.n_hiders[1]
        assert cfg.n_boxes[0] <= len(lay.boxes) <= cfg.n_boxes[1]
    again = generate_layout(cfg, np.random.default_rng(3))
    np.testing.assert_array_equal(again.walls, generate_layout(cfg, np.random.default_rng(3)).walls)


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_render_rgb_array(variant):
    env = make_env(variant, render_mode="rgb_array", horizon=4)
    env.reset(seed=2)
    env.step({a: env.action_space(a).sample() for a in env.agents})
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.std() > 10
    assert make_env(variant).render() is None


def test_frames_carry_a_team_colour_legend():
    """The header (24 rows) names the teams beside dots of their colours, so a video
    says which team is which; nothing else in the header has those colours."""
    from jaxsrl.envs.hide_and_seek.render import HIDER_RGB, SEEKER_RGB  # noqa: PLC0415
    env = make_env("quadrant", render_mode="rgb_array", horizon=4)
    env.reset(seed=2)
    header = env.render()[:24].reshape(-1, 3)
    for rgb in (HIDER_RGB, SEEKER_RGB):
        assert (header == rgb).all(axis=1).sum() >= 20, rgb  # a dot, not a stray pixel


def test_actor_vector_env_steps_it():
    """The actor's multi-agent group (``jaxsrl.envs.make_actor_env``) steps the game and
    reports the episode statistics; the full game with pinned team sizes too."""
    from jaxsrl.envs import make_actor_env

    for name, kwargs in [
        ("hide_and_seek", {"horizon": 4}),
        ("hide_and_seek_full", {"horizon": 3, "n_hiders": (3, 3), "n_seekers": (3, 3)}),
    ]:
        venv = make_actor_env(name, 2, 0, kwargs)
        venv.reset()
        episodes = []
        for _ in range(kwargs["horizon"]):
            actions = np.stack([venv.action_space.sample() for _ in range(venv.num_rows)])
            episodes += venv.step(actions).episodes
        assert len(episodes) == venv.num_rows
        assert "hider_seen_fraction" in episodes[0]


def test_connectivity_check_is_a_switch(monkeypatch):
    """``check_connected`` (ours, off by default) resamples a layout whose floor is split."""
    import jaxsrl.envs.hide_and_seek.layout as layout_mod

    calls = []
    monkeypatch.setattr(layout_mod, "is_connected", lambda free: calls.append(1) or len(calls) > 1)
    plain = generate_layout(make_config("quadrant"), np.random.default_rng(3))
    assert calls == []  # not consulted by default
    checked = generate_layout(make_config("quadrant", check_connected=True), np.random.default_rng(3))
    assert len(calls) == 2  # the first layout was rejected, the second kept
    assert not np.array_equal(plain.hiders, checked.hiders)


def test_holding_fractions_match_the_held_state_step_by_step():
    env = make_env("full")
    env.reset(seed=5)
    rng = np.random.default_rng(0)
    nvec = env.action_space(env.possible_agents[0]).nvec
    held = []
    while env.agents:
        _, _, _, _, info = env.step({a: rng.integers(0, nvec) for a in env.agents})
        held.append(env.held >= 0)
    held = np.array(held)  # [T, A]
    n_h = int(info["hider_0"]["episode_stats"]["n_hiders"])
    stats = info["hider_0"]["episode_stats"]
    assert held[:, :n_h].any() and held[:, n_h:].any()
    assert stats["hider_holding_fraction"] == pytest.approx(held[:, :n_h].mean())
    assert stats["seeker_holding_fraction"] == pytest.approx(held[:, n_h:].mean())


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_a_reused_scene_starts_like_a_new_env(variant):
    # An env reuses its scene's model, data, ray casts, buffers and grab/lock state from one
    # episode to the next (env._SceneParts): an episode begun there after objects were held
    # and locked must go exactly as the same episode in a new env, to its end (episode_stats).
    used = make_env(variant, horizon=30)
    used.reset(seed=0)
    layout = used.layout
    rng = np.random.default_rng(1)
    for _ in range(200):  # move at random, always pressing grab and lock, until both took hold
        if (used.held >= 0).any() and (used.lock_team >= 0).any():
            break
        used.step({a: np.r_[rng.integers(0, 11, 3), 1, 1] for a in used.agents})
        if not used.agents:
            used.reset(options={"layout": layout})
    assert (used.held >= 0).any() and (used.lock_team >= 0).any()
    new = make_env(variant, horizon=30)
    out_used = used.reset(seed=5, options={"layout": layout})
    out_new = new.reset(seed=5, options={"layout": layout})
    for t in range(30):
        for x, y in zip(out_used, out_new):  # obs and infos (then rewards, terminations, truncations)
            assert x.keys() == y.keys()
            for a in x:
                if isinstance(x[a], dict):
                    for k in x[a]:
                        np.testing.assert_array_equal(x[a][k], y[a][k], err_msg=f"step {t}: {a} {k}")
                else:
                    assert x[a] == y[a], (t, a)
        for name in ("held", "locked", "which_locked", "lock_events"):  # Manipulation's state
            np.testing.assert_array_equal(getattr(used._manip, name), getattr(new._manip, name), err_msg=name)
        acts = {a: np.r_[rng.integers(0, 11, 3), rng.integers(0, 2, 2)] for a in used.agents}
        out_used, out_new = used.step(acts), new.step(acts)
    assert not used.agents and "episode_stats" in out_used[4][next(iter(out_used[4]))]
