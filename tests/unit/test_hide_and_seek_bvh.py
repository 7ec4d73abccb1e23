"""``bvh.world_bvh`` against the tree MuJoCo's compiler builds, bit for bit: the world
body of seeded layouts (floor and walls, as ``SceneCache`` lays them out) and small
hand-made worlds that hit the compiler's edge cases (equal positions, equal edges, a
flat box, geoms without contacts).

Mutations caught (each tried alone): the ``MJ_EPS`` margin of the longest-axis choice
dropped (the square of boxes), the index tie-break reversed (seeded layouts and the row
of boxes), the flat-side widening dropped (the thin box), the dropped geoms kept.
"""

import mujoco
import numpy as np
import pytest

from jaxsrl.envs.hide_and_seek import generate_layout, make_config
from jaxsrl.envs.hide_and_seek.bvh import MJ_EPS, world_bvh
from jaxsrl.envs.hide_and_seek.layout import Layout
from jaxsrl.envs.hide_and_seek.scene import build_mjcf


def _check(model, where):
    """``world_bvh`` of ``model``'s world body equals the compiled rows, dtype and bits."""
    g = np.arange(model.body_geomadr[0], model.body_geomadr[0] + model.body_geomnum[0])
    got = world_bvh(g[0], model.geom_contype[g], model.geom_conaffinity[g], model.geom_pos[g], model.geom_quat[g],
                    model.geom_aabb[g])
    assert got is not None, where
    lo, n = model.body_bvhadr[0], model.body_bvhnum[0]
    for name, a in zip(("aabb", "child", "nodeid", "depth"), got):
        b = getattr(model, f"bvh_{name}")[lo:lo + n]
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: bvh_{name}"
        assert a.tobytes() == np.ascontiguousarray(b).tobytes(), f"{where}: bvh_{name}\n{a}\n{b}"


@pytest.mark.parametrize("variant", ["quadrant", "full"])
def test_world_bvh_of_seeded_layouts_is_the_compiled_one(variant):
    cfg = make_config(variant)
    rng = np.random.default_rng(11)
    empty = np.zeros((0, 3))
    for k in range(150):
        walls = generate_layout(cfg, rng).walls
        only = Layout(walls=walls, hiders=empty, seekers=empty, boxes=empty, box_sizes=empty, ramps=empty)
        _check(mujoco.MjModel.from_xml_string(build_mjcf(cfg, only)), f"{variant} layout {k}")


def _world(*geoms):
    return mujoco.MjModel.from_xml_string(f"<mujoco><worldbody>{''.join(geoms)}</worldbody></mujoco>")


def _box(pos, size, extra=""):
    return f'<geom type="box" pos="{pos}" size="{size}" {extra}/>'


def test_world_bvh_edge_cases_are_the_compiled_ones():
    square = [_box(f"{x} {y} 0.5", "0.5 0.5 0.5") for x in (-3, 3) for y in (-3, 3)]
    _check(_world(*square), "square of boxes: equal x and y edges")
    row = [_box(f"{x} 0 0.5", f"0.{k + 1} 0.5 0.5") for k, x in enumerate((2, 0, 2, 0, 2, 1, 0))]
    _check(_world(*row), "row of boxes: equal x positions, ties across the median")
    _check(_world(_box("0 0 1", "1 1 2e-15"), _box("0 0 1", "1 1 2e-15")), "thin boxes: flat z extent")
    ghosts = [_box(f"{k} 1 0", "0.2 0.2 0.2", 'contype="0" conaffinity="0"') for k in range(3)]
    _check(_world(ghosts[0], *square[:3], *ghosts[1:], '<geom type="plane" size="5 5 0.1"/>'),
           "geoms without contacts dropped, a plane")
    _check(_world(_box("1 2 3", "0.1 0.2 0.3")), "one geom: a leaf")


def test_world_bvh_refuses_what_it_does_not_handle():
    on = np.ones(3, np.int32)
    aabb = np.tile([0.0, 0, 0, 1, 1, 1], (3, 1))
    quat = np.tile([1.0, 0, 0, 0], (3, 1))
    pos = np.array([[0.0, 0, 0], [5, 0, 0], [9, 0, 0]])
    assert world_bvh(0, on, on, pos, quat, aabb) is not None
    turned = quat.copy()
    turned[1] = (np.cos(0.1), 0, 0, np.sin(0.1))
    assert world_bvh(0, on, on, pos, turned, aabb) is None  # a rotated geom
    chain = pos.copy()
    chain[:, 0] = (0.0, 0.6 * MJ_EPS, 1.2 * MJ_EPS)  # "equal" pairwise, not transitively
    assert world_bvh(0, on, on, chain, quat, aabb) is None
    assert world_bvh(0, 0 * on, 0 * on, pos, quat, aabb) is None  # nothing in contact
