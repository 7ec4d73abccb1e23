"""The compiled parts of the hide-and-seek step against their references.

* ``raycast.cast_rays`` (through ``Vision.sense``) against MuJoCo's own
  ``mj_multiRay`` (``Vision.mujoco_rays``, used when ``compiled_rays`` is False) on
  random poses of every movable body, overlaps, bodies in the air and observers inside
  other geoms included: ``seen`` and the lidar must be equal, bit for bit.
* ``MultiAgentVectorEnv``'s group step (``HideAndSeekEnv.step_rows`` writing each env's
  rows of the group's arrays in place) against its per-agent dict path, one env at a time,
  on the same seeded episodes (the full game: variable team sizes, so absent agents' rows;
  episodes end and reset, boxes get locked). Mutations caught: the controls reading row
  ``i`` instead of ``rows[i]`` of the group's actions; the lock flags written only while
  some object is locked (an unlock then leaves the last step's flags in the group's arrays).

The observation kernels (``raycast.line_of_sight``, ``raycast.seen_and_lidar``, ``build_observations``)
are pinned by ``test_hide_and_seek_reference.py`` (a trace recorded before them).
Mutations caught (each tried alone, by the first test): the lidar's angular window 30%
narrower (``0.7 * asin``), the bounding radius 10% small, the nearest-first cut 5 cm
early (``near[n] > best - 0.05``), the line-of-sight prune 0.1 m short of the target, and
the triangle test's barycentric bound 1 -> 1.2; with issue 32's box bounds: a box's
extent 10% small, its lidar window 30% narrow, an eye above or below a wall not given every
lidar ray.

The lidar windows (issue 32, fifth part: exact to the ray, from a polynomial ``atan2``) are
also tested alone, on rays that graze a sphere's or a box's silhouette within the
polynomial's error: every ray that the compiled cast sees meet a geom lies in that geom's
window. Mutations caught: ``ANGLE_TOL = 0`` (the windows not widened by the polynomial's
error; the grazing test) and ``ATAN_ERR = 1e-5`` (the book's stated bound, which its 7-digit
coefficients exceed; the bound test).
"""

import mujoco
import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import generate_layout, make_config, make_env
from jaxsrl.envs.hide_and_seek.scene import DOFS_PER_BODY, compile_scene
from jaxsrl.envs.hide_and_seek import kernels, raycast
from jaxsrl.envs.hide_and_seek.vision import Vision
from jaxsrl.envs.multi_agent import MultiAgentVectorEnv


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_compiled_rays_see_what_mujoco_rays_see(variant):
    cfg = make_config(variant)
    rng = np.random.default_rng(7)
    half = cfg.bounds_size / 2
    compared = 0
    for _ in range(4):
        layout = generate_layout(cfg, rng)
        model, index = compile_scene(cfg, layout)
        data = mujoco.MjData(model)
        compiled, reference = Vision(cfg, model, index), Vision(cfg, model, index)
        assert compiled.compiled_rays
        reference.compiled_rays = False
        m = len(index.body)
        q = data.qpos[: DOFS_PER_BODY * m].reshape(m, DOFS_PER_BODY)
        rest_z = np.concatenate([np.full(index.n_agents, cfg.agent_radius),
                                 np.asarray(layout.box_sizes).reshape(-1, 3)[:, 2] / 2, np.zeros(index.n_ramps)])
        for _ in range(60):
            q[:, 0:2] = rng.uniform(-half, half, (m, 2))
            # at rest height, some up in the air (not the floor: an eye at z = 0 casts its
            # lidar in the plane of the ramps' base, where MuJoCo's mesh BVH can skip the
            # nearer of two triangles that the ray grazes; the compiled cast finds it)
            q[:, 2] = rest_z + np.where(rng.random(m) < 0.3, rng.uniform(0.0, 1.5, m), 0.0)
            q[:, 3] = rng.uniform(-np.pi, np.pi, m)
            if rng.random() < 0.3:  # two bodies overlapping: rays start inside a geom
                q[1, :2] = q[0, :2] + rng.normal(0, 0.1, 2)
            mujoco.mj_kinematics(model, data)
            seen_c, lidar_c = compiled.sense(data)
            seen_r, lidar_r = reference.sense(data)
            np.testing.assert_array_equal(seen_c, seen_r)
            np.testing.assert_array_equal(lidar_c, lidar_r)
            compared += lidar_c.size
    assert compared > 4 * 60 * 2 * cfg.n_lidar


def test_polynomial_atan2_within_its_bound():
    rng = np.random.default_rng(0)
    angles = np.concatenate([np.linspace(-np.pi, np.pi, 40_001), np.arange(-8, 9) * np.pi / 8])
    radii = np.concatenate([np.ones(40_001), np.ones(17)]) * np.exp(rng.uniform(-20, 20, angles.size))
    worst = 0.0
    for x, y in zip(radii * np.cos(angles), radii * np.sin(angles)):
        err = abs((raycast._atan2(y, x) - np.arctan2(y, x) + np.pi) % (2 * np.pi) - np.pi)
        worst = max(worst, err)
    assert worst <= raycast.ATAN_ERR
    assert raycast._atan2(0.0, 0.0) == 0.0


def _window_holds(a, b, k, n_lidar):
    return a <= k <= b or a <= k + n_lidar <= b


@pytest.mark.parametrize("n_lidar", [30, 7, 360])
def test_lidar_windows_hold_every_ray_that_meets_the_geom(n_lidar):
    """Spheres and boxes placed so that a lidar ray grazes their silhouette (inside by less
    than the polynomial atan2's error): each ray the compiled cast sees meet the geom must
    lie in the geom's window (``_bounds``), else the cull would change what a ray hits."""
    rng = np.random.default_rng(n_lidar)
    angles = 2 * np.pi * np.arange(n_lidar) / n_lidar  # as Vision builds the lidar rays
    ux, uy = np.cos(angles), np.sin(angles)
    step = 2 * np.pi / n_lidar
    met = grazing = 0
    for case in range(1500):
        p = rng.uniform(-3, 3, 3)
        k = int(rng.integers(n_lidar))
        t = rng.uniform(0.3, 6.0)
        size = np.zeros((1, 3))
        xmat = np.eye(3).reshape(1, 9).copy()
        if case % 2 == 0:  # a sphere whose silhouette ray k grazes, inside by under 3e-5 rad
            r = rng.uniform(0.05, 1.0)
            centre_angle = angles[k] + rng.choice([-1, 1]) * (np.arcsin(min(r / t, 1.0)) - rng.uniform(0, 3e-5))
            xpos = p + t * np.array([np.cos(centre_angle), np.sin(centre_angle), 0.0])
            gtype, size[0, 0], rbound = raycast.SPHERE, r, r
        else:  # a box with a corner just inside ray k, some turned about z
            half = rng.uniform(0.05, 1.5, 3)
            corner = p + t * np.array([ux[k], uy[k], 0.0])
            yaw = 0.0 if rng.random() < 0.7 else rng.uniform(-np.pi, np.pi)
            c, s = np.cos(yaw), np.sin(yaw)
            rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            offset = rng.choice([-1, 1], 3) * half * (1 - rng.uniform(0, 1e-6, 3))
            offset[2] = rng.uniform(-0.5, 0.5) * half[2]
            xpos = corner + rot @ offset
            xmat[0] = rot.reshape(9)
            gtype, size[0], rbound = raycast.BOX, half, np.linalg.norm(half)
        gpos = xpos.reshape(1, 3)
        _, a, b = raycast._bounds(gpos, xmat, size, np.array([gtype]), np.array([rbound]), 0, p[0], p[1], p[2],
                               step, n_lidar)
        for j in range(n_lidar):
            if gtype == raycast.SPHERE:
                x = raycast._ray_sphere(gpos[0, 0], gpos[0, 1], gpos[0, 2], size[0, 0] ** 2, p[0], p[1], p[2],
                                        ux[j], uy[j], 0.0)
            else:
                x = raycast._ray_box(gpos, xmat, size, 0, p[0], p[1], p[2], ux[j], uy[j], 0.0)
            if x >= 0:
                met += 1
                grazing += j == k
                assert _window_holds(a, b, j, n_lidar), (case, j, a, b)
    assert grazing > 1000 and met > grazing  # the grazing rays met their geoms, and others did too


class _DictOnly:
    """The env without ``step_rows``: ``MultiAgentVectorEnv`` takes its dict path."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        if name == "step_rows":
            raise AttributeError(name)
        return getattr(self._env, name)


def test_vector_env_group_step_matches_per_env_steps():
    kwargs = {"variant": "full", "horizon": 30}
    fast = MultiAgentVectorEnv(make_env, kwargs, 2, seed=3)
    slow = MultiAgentVectorEnv(lambda **kw: _DictOnly(make_env(**kw)), kwargs, 2, seed=3)
    obs_f, obs_s = fast.reset(), slow.reset()
    for k in obs_s:
        np.testing.assert_array_equal(obs_f[k], obs_s[k])
    rng = np.random.default_rng(0)
    nvec = fast.action_space.nvec
    ended = absent = locked = 0
    for _ in range(100):
        action = rng.integers(0, nvec, size=(fast.num_rows, len(nvec)))
        f, s = fast.step(action), slow.step(action)
        for name in ("reward", "terminated", "truncated", "valid"):
            np.testing.assert_array_equal(getattr(f, name), getattr(s, name), err_msg=name)
        for part in ("obs", "final_obs"):
            for k, v in getattr(s, part).items():
                np.testing.assert_array_equal(getattr(f, part)[k], v, err_msg=f"{part} {k}")
        assert f.episodes == s.episodes
        ended += len(s.episodes)
        absent += int(np.count_nonzero(~s.valid))
        locked += sum(int(np.count_nonzero(env.lock_team >= 0)) for env in fast.envs)
    assert ended > 0 and absent > 0 and locked > 0  # episodes ended, rows of absent agents, locks


def test_bind_gives_the_compiled_loop_for_those_types():
    # kernels.bind skips Numba's per-call dispatch: it must hand back the compiled overload
    # of the same loop (the same results), not the dispatcher, and compile one if need be.
    q = np.array([0.5, -2.0])
    fast = kernels.bind(kernels.speeds_below, q, 1.0)
    assert fast is not kernels.speeds_below
    assert fast(q, 3.0) is True and fast(q, 1.0) is False and fast(np.array([np.nan, 0.0]), 3.0) is False
    ints = np.array([1, 2], np.int32)  # types no call has used yet: compiled for them
    assert kernels.bind(kernels.speeds_below, ints, 3)(ints, 3) is True


def test_step_rows_takes_any_integer_actions_and_float_rewards():
    # step_rows' compiled loops are bound per type of the caller's arrays (env._row_kernels):
    # actions and rewards whose types change from step to step must give the same results.
    def run(action_types, reward_types):
        env = make_env("quadrant")
        first, _ = env.reset(seed=3)
        rows = np.arange(len(env.agents), dtype=np.int64)
        obs = {k: np.stack([first[a][k] for a in env.agents]) for k in first[env.agents[0]]}
        rng = np.random.default_rng(0)
        out = []
        for t in range(40):
            acts = rng.integers(0, [11, 11, 11, 2, 2], size=(len(rows), 5)).astype(action_types[t % len(action_types)])
            rew = np.zeros(len(rows), reward_types[t % len(reward_types)])
            env.step_rows(acts, rows, obs, rew)
            out.append(np.concatenate([rew.astype(np.float64)] + [v.ravel().astype(np.float64) for v in obs.values()]))
        return np.array(out)

    reference = run([np.int64], [np.float32])
    np.testing.assert_array_equal(run([np.int32, np.int64, np.int16], [np.float64, np.float32]), reference)


def test_step_rows_refuses_arrays_of_the_other_byte_order_and_steps_after_close():
    # Numba's type fingerprint does not tell byte orders apart: a big-endian array would reuse
    # the native loop bound to that key and be misread, so step_rows refuses it by name.
    env = make_env("quadrant")
    first, _ = env.reset(seed=3)
    rows = np.arange(len(env.agents), dtype=np.int64)
    obs = {k: np.stack([first[a][k] for a in env.agents]) for k in first[env.agents[0]]}
    acts = np.full((len(rows), 5), 5, np.int64)
    env.step_rows(acts, rows, obs, np.zeros(len(rows)))  # binds the native key
    with pytest.raises(ValueError, match=">i8"):
        env.step_rows(acts.astype(">i8"), rows, obs, np.zeros(len(rows)))
    with pytest.raises(ValueError, match=">f8"):
        env.step_rows(acts, rows, obs, np.zeros(len(rows), ">f8"))
    env.close()
    with pytest.raises(RuntimeError, match="call reset"):
        env.step_rows(acts, rows, obs, np.zeros(len(rows)))
    assert env.agents == []


def test_step_rows_refuses_rows_and_observation_arrays_it_would_write_outside():
    # step_rows' compiled loops index without bounds checks: a row outside the arrays, or an
    # obs array of another shape, is refused by name before anything is stepped or written.
    env, ref = make_env("quadrant"), make_env("quadrant")
    first, _ = env.reset(seed=3)
    ref.reset(seed=3)
    n = len(env.agents)
    rows = np.arange(n, dtype=np.int64)
    obs = {k: np.stack([first[a][k] for a in env.agents]) for k in first[env.agents[0]]}
    acts = np.full((n, 5), 5, np.int64)
    rew = np.zeros(n)
    for bad in ([0, 1, 2, n], [-1, 1, 2, 3], [0, 1, 2, 10**6], [0, 1, 1, 3]):
        with pytest.raises(ValueError, match=rf"rows must be distinct and lie in 0\.\.{n - 1}.*{bad[3]}\]"):
            env.step_rows(acts, np.array(bad, np.int64), obs, rew)
    with pytest.raises(ValueError, match=rf"rows must be .* shape \[{n}\]"):
        env.step_rows(acts, rows[:-1], obs, rew)
    with pytest.raises(ValueError, match=r"rows must be distinct and lie in 0\.\.1 "):  # the fewest rows of any array
        env.step_rows(acts, rows, {**obs, "lidar": obs["lidar"][:2]}, rew)
    with pytest.raises(ValueError, match=r"rows must be distinct and lie in 0\.\.2 "):
        env.step_rows(acts[:3], rows, obs, rew)
    with pytest.raises(ValueError, match=r"obs\['boxes'\] must be .* got float32 \(4, 1, "):
        env.step_rows(acts, rows, {**obs, "boxes": obs["boxes"][:, :1]}, rew)
    with pytest.raises(ValueError, match=r"obs\['ramps_mask'\] .* got missing"):
        env.step_rows(acts, rows, {k: v for k, v in obs.items() if k != "ramps_mask"}, rew)
    frozen = {k: v.copy() for k, v in obs.items()}
    frozen["self"].flags.writeable = False
    with pytest.raises(ValueError, match=r"obs\['self'\] .* got read-only float32"):
        env.step_rows(acts, rows, frozen, rew)
    with pytest.raises(ValueError, match=r"reward must be .* shape \[rows\]"):
        env.step_rows(acts, rows, obs, np.zeros((n, 1)))
    for dtype in (np.float16, np.longdouble):  # float kinds the compiled loops do not take
        with pytest.raises(ValueError, match=rf"reward must be .*float32 or float64.* got {np.dtype(dtype).str}"):
            env.step_rows(acts, rows, obs, np.zeros(n, dtype))
    with pytest.raises(ValueError, match="actions must be a NumPy array, got list"):
        env.step_rows(acts.tolist(), rows, obs, rew)
    with pytest.raises(ValueError, match="obs must be a dict"):
        env.step_rows(acts, rows, list(obs.values()), rew)
    # nothing was stepped: the next valid step is the reference env's first
    env.step_rows(acts, rows, obs, rew)
    got, want = ref.step({a: acts[i] for i, a in enumerate(ref.agents)})[0], obs
    for i, a in enumerate(ref.agents):
        for k in want:
            np.testing.assert_array_equal(want[k][i], got[a][k])
