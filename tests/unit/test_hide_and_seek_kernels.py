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
"""

import mujoco
import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import generate_layout, make_config, make_env
from jaxsrl.envs.hide_and_seek.scene import DOFS_PER_BODY, compile_scene
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
