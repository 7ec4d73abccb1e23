"""Compiled scenes kept across episodes: a layout is laid out on a model built once.

Compiling an episode's MJCF and allocating its ``MjData`` cost about 2.5 ms per reset.
``SceneCache`` holds one model per *structure* (the numbers of hiders, seekers, boxes and
ramps: one for the quadrant game, up to 3 x 3 x 7 for the full game, at most
``MAX_SCENES`` kept) and lays every later episode with that structure out on it. A
structure it does not hold gets a copy (``copy.copy``, about 0.3 ms) of the process's
compiled template of it (``_TEMPLATES``, shared by an actor's envs: each structure is
compiled once per process) and a new ``MjData``; no reset compiles a model otherwise.

- walls are static geoms of the world body; the model holds ``n_walls`` of them (a
  template with more slots is taken, or compiled, when a layout has more). Those the
  layout uses get its positions and sizes, rounded to the 6 significant digits the MJCF
  text carries (``scene._f``); the rest are switched off: no contacts (``contype =
  conaffinity = 0``), invisible to rays (group ``UNUSED_GROUP`` and alpha 0), parked
  below the floor. The world body's bounding volume hierarchy (the midphase's boxes) is
  rebuilt for the floor and the walls in use by ``bvh.world_bvh``, the compiler's
  algorithm (a few µs; a walls-only model is compiled only where it refuses).
- a box of a size the model was not built with takes the compiled values (size, bounding
  sphere and box, mass, inertia and its frame) from a one-box model of that size, compiled
  once per size; ``mj_setConst`` then recomputes what the compiler derives from them.
- the ``MjData`` of the structure is reused (``mj_resetData``); its arena is sized by
  ``ARENA_BYTES`` instead of MuJoCo's default of about 15 MiB.
- grab and lock edit the model (weld poses, joint limits); ``layout`` switches every weld
  off and every limit off again.

``tests/unit/test_hide_and_seek_scene_cache.py`` checks that a laid-out model, compiled
or copied from a template, equals the one compiled from the layout's own MJCF, field by
field, bit for bit, that both step to the same bits, and that copies share no memory;
``tests/unit/test_hide_and_seek_bvh.py`` checks ``world_bvh`` against compiled trees; the
reference trace (``tests/unit/test_hide_and_seek_reference.py``) runs through the cache.
"""

from __future__ import annotations

import collections
import copy
import dataclasses

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek.bvh import world_bvh
from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.layout import Layout
from jaxsrl.envs.hide_and_seek.scene import SceneIndex, build_mjcf, compile_scene

UNUSED_GROUP = 5
"""Geom group of the switched-off walls: in no group the ray casts look at."""
ARENA_BYTES = 4 << 20
"""``MjData`` arena (bytes) per scene: the busiest full-game episodes of random play use
about 0.2 MiB (contacts and constraint rows), MuJoCo's default is about 15 MiB."""
MAX_SCENES = 24
"""Structures a ``SceneCache`` keeps by default: about 22 MB per env at most; the full
game's 63 structures (1-3 hiders, 1-3 seekers, 3-9 boxes) then hit about 40% of resets,
and a miss copies the process's template (about 0.8 ms with the new ``MjData``; the
first miss of a structure in the process compiles it, about 2.2 ms more)."""
_PARKED_Z = -10.0
_POS_SIZE = [0, 1, 4, 2, 3, 4]  # Layout.walls columns (cx, cy, hx, hy, height) -> a wall geom's pos, then size
_HALF_Z = np.array([1.0, 1.0, 0.5, 1.0, 1.0, 0.5])  # the geom's z and z half size: height / 2
MAX_TEMPLATES = 128
"""Structures whose compiled models the process keeps (``_TEMPLATES``): the full game has
63, each with one to three wall-slot counts (8-10); a model is about 63 KB
(``mj_sizeModel``), so about 8 MB for the full game."""


@dataclasses.dataclass
class _Template:
    """A compiled scene as ``SceneCache`` starts from it (never laid out itself)."""

    model: mujoco.MjModel
    index: SceneIndex  # n_walls: the model's wall slots
    wall_geoms: np.ndarray  # [n_walls] geom ids
    box_sizes: np.ndarray  # [B, 3] the sizes the model's boxes were compiled with


_TEMPLATES: collections.OrderedDict[tuple, list[_Template]] = collections.OrderedDict()
"""Compiled scenes per (config, structure), one per number of wall slots compiled, shared
by every ``SceneCache`` of the process (an actor's envs), least recently used structure
dropped first past ``MAX_TEMPLATES``: a ``SceneCache`` miss for a structure seen before
copies one instead of compiling."""
MAX_BOX_TEMPLATES = 64
"""Box sizes whose one-box models the process keeps (``_BOX_TEMPLATES``): three in the
full game (the cube and an elongated box along x or y), each model a few KB."""
_BOX_TEMPLATES: collections.OrderedDict[tuple, mujoco.MjModel] = collections.OrderedDict()
"""One-box models per (config, box size rounded as the MJCF text carries it), from which a
layout's box of another size takes its mass, inertia and bounds (``SceneCache.layout``);
shared by every ``SceneCache`` of the process, as ``_TEMPLATES`` (each new env compiled
its own, about 1 ms a size), least recently used dropped first past ``MAX_BOX_TEMPLATES``."""


def _r6(values) -> np.ndarray:
    """``values`` as the MJCF text carries them (``%.6g``, ``scene._f``), as float64: one
    ``%`` formatting of all of them, each parsed back by ``float``."""
    flat = np.ravel(values).tolist()
    return np.fromiter(map(float, ("%.6g " * len(flat) % tuple(flat)).split()), np.float64, len(flat))


@dataclasses.dataclass
class _Scene:
    model: mujoco.MjModel
    data: mujoco.MjData
    index: SceneIndex  # n_walls: the model's wall slots
    wall_geoms: np.ndarray  # [n_walls] geom ids
    box_sizes: np.ndarray  # [B, 3] the sizes the model's boxes have now
    world_geoms: tuple[int, int]  # geom ids [a, b) of the world body: the floor, then the wall slots
    wall_contype: int
    wall_conaffinity: int
    wall_rgba: np.ndarray
    eq_data: np.ndarray  # as compiled (grab rewrites the welds' poses)
    memo: dict = dataclasses.field(default_factory=dict)  # SceneCache.memo while this scene is the last laid out
    n_used: int = -1  # wall slots switched on by the last layout (-1: none laid out yet)
    wall_first: int = -1  # the wall geoms are ids wall_first .. wall_last - 1 (-1: not consecutive)
    wall_last: int = -1
    indexes: dict = dataclasses.field(default_factory=dict)  # n walls in use -> the SceneIndex layout returns


def _template(cfg: HideAndSeekConfig, layout: Layout, n_walls: int) -> _Template:
    """The process's compiled scene for ``layout``'s structure with the fewest wall slots
    >= ``n_walls``; compiled (about 2 ms) from ``layout`` padded to ``n_walls`` small walls
    when there is none."""
    key = (cfg, len(layout.hiders), len(layout.seekers), len(layout.boxes), len(layout.ramps))
    kept = _TEMPLATES.setdefault(key, [])
    _TEMPLATES.move_to_end(key)
    fits = [t for t in kept if t.index.n_walls >= n_walls]
    if fits:
        return min(fits, key=lambda t: t.index.n_walls)
    padded = dataclasses.replace(layout, walls=np.concatenate(
        [layout.walls, np.tile([0.0, 0.0, 0.01, 0.01, 0.02], (n_walls - len(layout.walls), 1))]))
    model, idx = compile_scene(cfg, padded, arena_bytes=ARENA_BYTES)
    walls = np.array([mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"wall_{k}") for k in range(n_walls)],
                     np.intp)
    kept.append(_Template(model, idx, walls, layout.box_sizes.copy()))
    while len(_TEMPLATES) > MAX_TEMPLATES:
        _TEMPLATES.popitem(last=False)
    return kept[-1]


class SceneCache:
    """One compiled model and ``MjData`` per team and object counts, reused across episodes.

    Args:
      cfg: the game's settings (the same for every layout given to ``layout``).
      min_walls: wall slots of a new model (more if a layout needs them).
      max_scenes: structures kept (least recently used dropped first); each costs about
        0.9 MB resident (model, data and the arena's used part). The full game has 63.

    Raises:
      ValueError: ``max_scenes`` < 1.
    """

    def __init__(self, cfg: HideAndSeekConfig, min_walls: int = 8, max_scenes: int = MAX_SCENES):
        if max_scenes < 1:
            raise ValueError(f"max_scenes must be >= 1, got {max_scenes!r}")
        self._cfg = cfg
        self._min_walls = int(min_walls)
        self._max_scenes = int(max_scenes)
        self._scenes: collections.OrderedDict[tuple[int, int, int, int], _Scene] = collections.OrderedDict()
        self.memo: dict = {}
        """A dict kept with the scene ``layout`` returned last (empty when new, dropped with the
        scene): for what a caller derives from the model, the data and the counts alone, to
        build once per scene instead of once per episode."""

    def _walls_bvh(self, m: mujoco.MjModel, scene: _Scene, walls: np.ndarray) -> tuple[np.ndarray, ...]:
        """The world body's bounding volume hierarchy (``bvh_aabb``, ``bvh_child``,
        ``bvh_nodeid``, ``bvh_depth`` rows) as the compiler builds it for the floor and the
        walls in use (``m``'s wall geoms already laid out), computed by ``bvh.world_bvh``;
        from a compiled model of the floor and ``walls`` alone (its geom ids are those of
        the full scene's floor and first walls) where that refuses."""
        a, b = scene.world_geoms
        hit = world_bvh(a, m.geom_contype[a:b], m.geom_conaffinity[a:b], m.geom_pos[a:b], m.geom_quat[a:b],
                        m.geom_aabb[a:b])
        if hit is None:
            empty = np.zeros((0, 3))
            only = Layout(walls=walls, hiders=empty, seekers=empty, boxes=empty, box_sizes=empty, ramps=empty)
            t = mujoco.MjModel.from_xml_string(build_mjcf(self._cfg, only))
            n = int(t.body_bvhnum[0])
            hit = (t.bvh_aabb[:n], t.bvh_child[:n], t.bvh_nodeid[:n], t.bvh_depth[:n])
        return hit

    def __len__(self) -> int:
        return len(self._scenes)

    def _compile(self, layout: Layout, n_walls: int) -> _Scene:
        """A new scene for ``layout``'s structure: a copy of the process's compiled template
        (``_template``) and a new ``MjData``."""
        t = _template(self._cfg, layout, n_walls)
        model = copy.copy(t.model)
        w0 = int(t.wall_geoms[0])
        adr = int(model.body_geomadr[0])
        scene = _Scene(model, mujoco.MjData(model), t.index, t.wall_geoms, t.box_sizes.copy(),
                       (adr, adr + int(model.body_geomnum[0])), int(model.geom_contype[w0]),
                       int(model.geom_conaffinity[w0]), model.geom_rgba[w0].copy(), model.eq_data.copy())
        g = t.wall_geoms
        if np.array_equal(g, w0 + np.arange(len(g))):
            scene.wall_first, scene.wall_last = w0, w0 + len(g)
        return scene

    def _box_template(self, size: np.ndarray) -> mujoco.MjModel:
        """The process's compiled one-box model of box size ``size`` (``_BOX_TEMPLATES``)."""
        key = (self._cfg, _r6(size).tobytes())
        model = _BOX_TEMPLATES.get(key)
        if model is None:
            one = Layout(walls=np.zeros((0, 5)), hiders=np.zeros((1, 3)), seekers=np.zeros((1, 3)),
                         boxes=np.zeros((1, 3)), box_sizes=np.asarray(size, np.float64).reshape(1, 3),
                         ramps=np.zeros((0, 3)))
            model = _BOX_TEMPLATES[key] = mujoco.MjModel.from_xml_string(build_mjcf(self._cfg, one))
            while len(_BOX_TEMPLATES) > MAX_BOX_TEMPLATES:
                _BOX_TEMPLATES.popitem(last=False)
        _BOX_TEMPLATES.move_to_end(key)
        return model

    def layout(self, layout: Layout) -> tuple[mujoco.MjModel, mujoco.MjData, SceneIndex]:
        """The model, its reset ``MjData`` and index for ``layout`` (qpos not yet written).

        The returned ``SceneIndex`` has the layout's ``n_walls``; the model may hold more
        wall geoms (switched off). Objects returned earlier for the same counts are the
        same objects, now laid out anew.
        """
        key = (len(layout.hiders), len(layout.seekers), len(layout.boxes), len(layout.ramps))
        scene = self._scenes.get(key)
        n = len(layout.walls)
        if scene is None or scene.index.n_walls < n:
            scene = self._scenes[key] = self._compile(layout, max(n, self._min_walls))
            while len(self._scenes) > self._max_scenes:
                self._scenes.popitem(last=False)
        self._scenes.move_to_end(key)
        self.memo = scene.memo
        m, d, idx = scene.model, scene.data, scene.index
        # walls
        g = scene.wall_geoms
        if scene.wall_first >= 0:  # consecutive ids: slices (cheaper to write through than index arrays)
            used, unused = slice(scene.wall_first, scene.wall_first + n), slice(scene.wall_first + n, scene.wall_last)
        else:
            used, unused = g[:n], g[n:]
        if n:
            w = layout.walls
            pos_size = _r6(w[:, _POS_SIZE] * _HALF_Z).reshape(-1, 2, 3)  # (x, y, h / 2), (hx, hy, h / 2)
            size = pos_size[:, 1]
            m.geom_pos[used] = pos_size[:, 0]
            m.geom_size[used] = size
            m.geom_aabb[used, 3:] = size
            m.geom_rbound[used] = np.sqrt(np.einsum("ij,ij->i", size, size))
        if scene.n_used != n:  # else the same slots are in use as in the scene's last layout, switched as they are
            scene.n_used = n
            m.geom_aabb[used, :3] = 0.0
            m.geom_contype[used] = scene.wall_contype
            m.geom_conaffinity[used] = scene.wall_conaffinity
            m.geom_group[used] = 1
            m.geom_rgba[used] = scene.wall_rgba
            if n < len(g):
                m.geom_pos[unused] = (0.0, 0.0, _PARKED_Z)
                m.geom_contype[unused] = 0
                m.geom_conaffinity[unused] = 0
                m.geom_group[unused] = UNUSED_GROUP
                m.geom_rgba[unused, 3] = 0.0
        # the world body's BVH (midphase collision) over the floor and the used walls
        aabb, child, nodeid, depth = self._walls_bvh(m, scene, layout.walls)
        k, lo = len(aabb), int(m.body_bvhadr[0])
        m.bvh_aabb[lo:lo + k], m.bvh_child[lo:lo + k] = aabb, child
        m.bvh_nodeid[lo:lo + k], m.bvh_depth[lo:lo + k] = nodeid, depth
        m.body_bvhnum[0] = k
        # boxes
        sizes = np.asarray(layout.box_sizes, np.float64).reshape(-1, 3)
        same = sizes.tobytes() == scene.box_sizes.tobytes()  # the same bits (every quadrant layout)
        changed = () if same else np.flatnonzero(np.any(sizes != scene.box_sizes, axis=1))
        a = idx.n_agents
        for b in changed:
            t = self._box_template(sizes[b])
            body, geom = int(idx.body[a + b]), int(idx.geom[a + b])
            tb, tg = 3, int(mujoco.mj_name2id(t, mujoco.mjtObj.mjOBJ_GEOM, "box_0"))  # world, hider, seeker, box
            for name in ("mass", "inertia", "ipos", "iquat"):
                getattr(m, f"body_{name}")[body] = getattr(t, f"body_{name}")[tb]
            for name in ("size", "rbound", "aabb", "pos", "quat"):
                getattr(m, f"geom_{name}")[geom] = getattr(t, f"geom_{name}")[tg]
        if len(changed):
            scene.box_sizes = sizes.copy()
        # what grab and lock changed in the last episode
        m.jnt_limited[:] = 0
        m.jnt_range[:] = 0.0
        m.eq_data[:] = scene.eq_data
        mujoco.mj_resetData(m, d)
        if len(changed):
            mujoco.mj_setConst(m, d)
            # the compiler's mean inertia (the solver's tolerance scale), which mj_setConst
            # leaves alone: the diagonal of M at qpos0 summed in dof order, over nv
            m.stat.meaninertia = float(np.add.accumulate(m.dof_M0)[-1]) / m.nv
            mujoco.mj_resetData(m, d)
        index = scene.indexes.get(n)
        if index is None:
            index = scene.indexes[n] = dataclasses.replace(idx, n_walls=n)
        return m, d, index
