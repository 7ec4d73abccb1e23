"""A layout laid out on a cached model (``scene_cache.SceneCache``) is the scene compiled
from its own MJCF: the same model, field by field, and the same physics, bit for bit.

Mutations caught (each tried alone): the world body's BVH left as compiled for the first
layout (physics differs: stale wall bounding boxes in the midphase), the mean inertia not
recomputed after a box size change (full game; ``stat.meaninertia``), the box inertia not
copied from the one-box template (``body_inertia``), the weld poses or the joint limits not restored after an episode
that grabbed and locked (``eq_data``, ``jnt_limited``), the template handed out without a copy (the full game's
``copied`` run and the independence test).
"""

import collections

import mujoco
import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import generate_layout, make_config, scene_cache
from jaxsrl.envs.hide_and_seek.scene import DOFS_PER_BODY, compile_scene
from jaxsrl.envs.hide_and_seek.scene_cache import ARENA_BYTES, SceneCache

SAME_PREFIXES = ("body_", "dof_", "jnt_", "actuator_", "eq_", "bvh_")
LAYOUT_DEPENDENT = {"body_geomadr", "body_geomnum", "body_bvhadr", "body_bvhnum", "bvh_aabb", "bvh_child",
                    "bvh_nodeid", "bvh_depth"}  # the model's extra (switched-off) wall geoms shift these
GEOM_FIELDS = ("size", "aabb", "pos", "quat", "friction", "contype", "conaffinity", "group", "rgba", "margin",
               "type", "bodyid", "dataid")


def _wall_ids(model, n):
    return [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"wall_{k}") for k in range(n)]


def _start(cfg, layout, idx, model, data):
    q = data.qpos.reshape(-1, DOFS_PER_BODY)
    poses = np.concatenate([layout.hiders, layout.seekers, layout.boxes, layout.ramps])
    q[:, :2], q[:, 3] = poses[:, :2], poses[:, 2]
    q[:, 2] = np.concatenate([np.full(idx.n_agents, cfg.agent_radius), layout.box_sizes[:, 2] / 2,
                              np.zeros(idx.n_ramps)])
    mujoco.mj_forward(model, data)


@pytest.fixture
def no_templates(monkeypatch):
    """The process's compiled templates emptied for the test (and restored after it)."""
    monkeypatch.setattr(scene_cache, "_TEMPLATES", collections.OrderedDict())


def _no_compile(*args, **kwargs):
    raise AssertionError("compiled a scene: the cache should have copied a template")


@pytest.mark.parametrize("path", ["compiled", "copied"])
@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_laid_out_scene_equals_the_compiled_one(variant, path, no_templates, monkeypatch):
    """``copied``: every scene is a copy of a template another cache of the process compiled
    (one structure kept: the full game's changes of structure copy again)."""
    cfg = make_config(variant)
    rng = np.random.default_rng(1)
    layouts = [generate_layout(cfg, rng) for _ in range(14)]
    cache = SceneCache(cfg)
    if path == "copied":
        for layout in layouts:
            cache.layout(layout)
        cache = SceneCache(cfg, max_scenes=1)
        monkeypatch.setattr(scene_cache, "compile_scene", _no_compile)
    for episode, layout in enumerate(layouts):
        m1, d1, idx1 = cache.layout(layout)
        m0, idx0 = compile_scene(cfg, layout, arena_bytes=ARENA_BYTES)
        d0 = mujoco.MjData(m0)
        where = f"{variant} episode {episode}"
        assert (idx1.n_walls, idx1.n_agents, idx1.n_objects) == (idx0.n_walls, idx0.n_agents, idx0.n_objects)
        for name in dir(m0):
            if name.startswith(SAME_PREFIXES) and name not in LAYOUT_DEPENDENT:
                np.testing.assert_array_equal(getattr(m1, name), getattr(m0, name), err_msg=f"{where}: {name}")
        assert m1.stat.meaninertia == m0.stat.meaninertia, where
        w0, w1 = _wall_ids(m0, len(layout.walls)), _wall_ids(m1, len(layout.walls))
        for name in GEOM_FIELDS:  # movable bodies' geoms, then the walls in use
            a0, a1 = getattr(m0, f"geom_{name}"), getattr(m1, f"geom_{name}")
            if name != "bodyid" and name != "dataid":
                np.testing.assert_array_equal(a1[idx1.geom], a0[idx0.geom], err_msg=f"{where}: geom_{name}")
            np.testing.assert_array_equal(a1[w1], a0[w0], err_msg=f"{where}: wall geom_{name}")
        np.testing.assert_allclose(m1.geom_rbound[w1], m0.geom_rbound[w0], rtol=1e-15)  # broadphase only
        off = np.setdiff1d(_wall_ids(m1, idx1_slots(m1)), w1)
        assert not np.any(m1.geom_contype[off] | m1.geom_conaffinity[off]), where  # unused walls collide with nothing
        # the same physics, bit for bit: 100 steps of random controls from the layout's start
        _start(cfg, layout, idx0, m0, d0)
        _start(cfg, layout, idx1, m1, d1)
        controls = np.random.default_rng(episode).uniform(-0.9, 0.9, (100, m0.nu))
        for ctrl in controls:
            d0.ctrl[:] = d1.ctrl[:] = ctrl
            mujoco.mj_step(m0, d0, nstep=cfg.n_substeps)
            mujoco.mj_step(m1, d1, nstep=cfg.n_substeps)
        np.testing.assert_array_equal(d1.qpos, d0.qpos, err_msg=where)
        np.testing.assert_array_equal(d1.qvel, d0.qvel, err_msg=where)
        # what an episode's grabs and locks leave in the model and data (manipulation.py)
        m1.eq_data[:] = 7.0
        m1.jnt_limited[:] = 1
        m1.jnt_range[:] = 0.3
        d1.eq_active[:] = 1
    assert len(cache) < 14 or variant == "full"  # the quadrant game: one model for every episode


def test_copied_scenes_are_independent(no_templates):
    """Two caches' scenes of one structure (copies of one template): editing every array
    of one model and its data leaves the other and the template as they were."""
    cfg = make_config("quadrant")
    layout = generate_layout(cfg, np.random.default_rng(5))
    ma, da, _ = SceneCache(cfg).layout(layout)
    mb, db, _ = SceneCache(cfg).layout(layout)
    (template,) = next(iter(scene_cache._TEMPLATES.values()))
    assert len({id(ma), id(mb), id(template.model)}) == 3 and da is not db
    models = {"other": mb, "template": template.model}
    before = {(k, n): np.copy(getattr(m, n)) for k, m in models.items() for n in dir(m)
              if isinstance(getattr(m, n), np.ndarray)}
    data_before = {n: np.copy(getattr(db, n)) for n in ("qpos", "qvel", "ctrl", "eq_active")}
    edited = 0
    for name in dir(ma):
        a = getattr(ma, name)
        if isinstance(a, np.ndarray) and a.size and a.dtype.kind == "f":
            a += 1.0
            edited += 1
    assert edited > 50
    da.qpos[:], da.qvel[:], da.ctrl[:], da.eq_active[:] = 1.0, 1.0, 0.5, 1
    for (k, name), value in before.items():
        np.testing.assert_array_equal(getattr(models[k], name), value, err_msg=f"{k}: {name}")
    for name, value in data_before.items():
        np.testing.assert_array_equal(getattr(db, name), value, err_msg=f"data: {name}")


def idx1_slots(model):
    """Number of wall geoms the cached model holds."""
    n = 0
    while mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"wall_{n}") >= 0:
        n += 1
    return n


def test_cache_keeps_at_most_max_scenes_structures():
    cfg = make_config("full")
    cache = SceneCache(cfg, max_scenes=2)
    rng = np.random.default_rng(3)
    keys = []
    while len(set(keys)) < 4:
        layout = generate_layout(cfg, rng)
        cache.layout(layout)
        keys.append((len(layout.hiders), len(layout.seekers), len(layout.boxes)))
        assert len(cache) <= 2
    assert len(cache) == 2
    with pytest.raises(ValueError, match="max_scenes"):
        SceneCache(cfg, max_scenes=0)


def test_walls_only_compile_where_world_bvh_refuses(monkeypatch, no_templates):
    """The fallback (a walls-only model compiled) lays out the same world body BVH rows."""
    cfg = make_config("full")
    rng = np.random.default_rng(2)
    layouts = [generate_layout(cfg, rng) for _ in range(4)]

    def world_rows(cache, layout):
        m, _, _ = cache.layout(layout)
        lo, n = m.body_bvhadr[0], m.body_bvhnum[0]
        return [np.copy(getattr(m, f"bvh_{k}")[lo:lo + n]) for k in ("aabb", "child", "nodeid", "depth")]

    built = [world_rows(SceneCache(cfg), layout) for layout in layouts]
    monkeypatch.setattr(scene_cache, "world_bvh", lambda *args: None)
    for layout, rows in zip(layouts, built):
        for a, b in zip(world_rows(SceneCache(cfg), layout), rows):
            assert a.tobytes() == b.tobytes()
