"""What each agent sees: a 135-degree vision cone with line of sight, and a lidar ring.

Line of sight is one ray from the observer's centre to the target's centre (agent
centre, box centre, ramp centroid), as released (mae:util/vision.py:41-66). Everything
solid but the floor occludes: boxes, ramps, other agents and, with ``rays_hit_walls``
(default; a deviation, see config.py), walls. The cone's axis is the agent's front, at
yaw + ``facing_offset_deg`` (+90: the released -90, mae:modules/agents.py:83, in our
y-mirrored frame). A target is
visible when it is inside the cone (measured in the x-y plane) and the first thing the
ray meets belongs to the target's body (an agent's arms count, ``check_body``,
mae:util/vision.py:41-60) or lies beyond the target's centre.

Lidar (mae:wrappers/lidar.py:34-38, 96-105): ``n_lidar`` horizontal rays from the
agent's centre in the world frame, ray ``k`` at angle 2 pi k / n_lidar from +x,
hitting what line of sight hits; the value is the distance to the first hit in
metres, also beyond ``lidar_range``, and ``lidar_range`` where nothing is hit.
The rays are cast by a compiled loop that follows MuJoCo's ``mj_ray`` for spheres,
boxes and meshes (``raycast.cast_rays``; ``Vision.mujoco_rays`` casts the same bundle with
``mujoco.mj_multiRay``, the reference it is tested against); the arithmetic around them
is two compiled loops, and the three run as one call (``raycast.sense``).
"""

from __future__ import annotations

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek import kernels, raycast
from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.scene import GROUP_AGENT, GROUP_BOX, GROUP_RAMP, GROUP_WALL, SceneIndex


def _groups(*groups: int) -> np.ndarray:
    mask = np.zeros(6, np.uint8)
    mask[list(groups)] = 1
    return mask


class Vision:
    """Ray-cast sensing for one compiled scene; buffers are allocated once.

    Targets are agents then objects (boxes, ramps), ``N = A + O`` of them; each observer
    looks at the ``N - 1`` targets other than itself: ``targets[i]`` lists them (agent
    order, then objects), so ``seen[i, :A - 1]`` are the other agents in agent order and
    ``seen[i, A - 1:]`` the objects.

    ``sense(data)`` returns ``(seen, lidar)``:
      seen: ``[A, N - 1]`` bool, observer ``i`` sees target ``targets[i, c]``
        (``full(seen)``: the ``[A, N]`` matrix with a False diagonal).
      lidar: ``[A, n_lidar]`` float32 ranges (m).
    ``data`` must have up-to-date kinematics (``mj_kinematics`` or ``mj_forward``).
    """

    def __init__(self, cfg: HideAndSeekConfig, model: mujoco.MjModel, index: SceneIndex):
        self._model = model
        self._idx = index
        a, n = index.n_agents, index.n_agents + index.n_objects
        k = n - 1  # line-of-sight rays per observer
        self._cos_half = float(np.cos(np.deg2rad(cfg.vision_cone_deg) / 2))
        solid = (GROUP_BOX, GROUP_RAMP, GROUP_AGENT) + ((GROUP_WALL,) if cfg.rays_hit_walls else ())
        self._groups = _groups(*solid)
        self._lidar_range = float(cfg.lidar_range)
        angles = 2 * np.pi * np.arange(cfg.n_lidar) / cfg.n_lidar  # [L] rad from +x
        self._n_lidar = cfg.n_lidar
        self._facing = float(np.deg2rad(cfg.facing_offset_deg))
        cols = np.arange(k, dtype=np.intp)
        self.targets = cols + (cols >= np.arange(a)[:, None])
        """``[A, N - 1]`` target index (agents, then objects) of each observer's columns."""
        self._rows = np.repeat(np.arange(a), k).reshape(a, k)
        self._tgt_geom = np.asarray(index.geom, np.intp)[self.targets]  # [A, N - 1]
        self._tgt_body = np.asarray(index.body, np.int64)[self.targets]  # [A, N - 1]
        self._geom_body = np.asarray(model.geom_bodyid, np.int64)  # geom id -> body id
        # the geoms a ray can meet: mj_ray's filters (group, alpha 0 invisible; static included)
        group = np.minimum(np.maximum(model.geom_group, 0), 5)
        alpha = np.where(model.geom_matid < 0, model.geom_rgba[:, 3],
                         model.mat_rgba[np.maximum(model.geom_matid, 0), 3] if model.nmat else 1.0)
        self._ray_geoms = np.flatnonzero((self._groups[group] > 0) & (alpha != 0)).astype(np.int64)
        ray_types = set(model.geom_type[self._ray_geoms].tolist())
        self.compiled_rays = ray_types <= {raycast.SPHERE, raycast.BOX, raycast.MESH}
        """True: the rays are cast by ``raycast.cast_rays`` (the scene has only spheres,
        boxes and meshes among the geoms a ray can meet); else by ``mujoco_rays``."""
        self._mesh_vert = np.asarray(model.mesh_vert, np.float64).reshape(-1, 3)
        # One ray bundle per observer: N - 1 line-of-sight rays then L lidar rays.
        # Rows are contiguous views, written in place by the ray casts.
        self._vec = np.zeros((a, k + cfg.n_lidar, 3), np.float64)
        self._ids = np.zeros((a, k + cfg.n_lidar), np.int32)
        self._hit = np.zeros((a, k + cfg.n_lidar), np.float64)
        self._vec[:, k:, 0] = np.cos(angles)[None, :]  # world frame: ray 0 along +x, fixed
        self._vec[:, k:, 1] = np.sin(angles)[None, :]
        self._flat_rays = [self._vec[i].reshape(-1) for i in range(a)]  # views
        self._eye_bodies = [int(b) for b in index.body[:a]]
        eye_ids = np.asarray(index.body[:a], np.intp)
        contiguous = a > 0 and np.array_equal(eye_ids, eye_ids[0] + np.arange(a))
        self._eye_sl = slice(int(eye_ids[0]), int(eye_ids[0]) + a) if contiguous else eye_ids
        self._yaw_sl = slice(3, 4 * a, 4)
        self._k, self._nray = k, k + cfg.n_lidar
        self._eye_ids = eye_ids.astype(np.int64)
        self._in_cone = np.zeros((a, k), np.bool_)
        self._dist = np.empty((a, k))
        self.centre_dist = self._dist
        """``[A, N - 1]`` distances (m) from each agent's centre to the centre of each of its
        targets (columns as ``seen``) at the last ``sense``. Overwritten by the next."""
        self._shape = (a, n)
        self._eyes = np.empty((a, 3))
        m = model  # views of the model's arrays, fetched once (the model outlives the episode)
        self._sense_args = (self._eye_ids, self._tgt_geom, self._facing, self._cos_half, m.geom_size, m.geom_type,
                            self._geom_body, m.geom_dataid, m.geom_rbound, self._ray_geoms, self._mesh_vert,
                            m.mesh_face, m.mesh_vertadr, m.mesh_faceadr, m.mesh_facenum, self._tgt_body,
                            self._lidar_range, self._vec, self._dist, self._in_cone, np.empty((a, k)), self._eyes,
                            self._ids, self._hit)
        self._bound: tuple = (None, None, None)  # (data, seen, lidar, raycast.sense bound to them, its arguments)

    def mujoco_rays(self, data: mujoco.MjData, ids: np.ndarray, hit: np.ndarray) -> None:
        """The ray bundle cast by ``mujoco.mj_multiRay``, one call per observer, into
        ``ids`` ``[A, R]`` int32 and ``hit`` ``[A, R]`` float64 (the rays of the last
        ``sense``; what ``raycast.cast_rays`` reproduces)."""
        groups, m, nray = self._groups, self._model, self._nray
        for eye, flat, body, ids_i, hit_i in zip(data.xpos[self._eye_sl], self._flat_rays, self._eye_bodies, ids, hit):
            mujoco.mj_multiRay(m, data, eye, flat, groups, 1, body, ids_i, hit_i, None, nray, 1e6)

    def full(self, seen: np.ndarray) -> np.ndarray:
        """``[A, N]`` bool from ``[A, N - 1]`` ``seen``: column = target, the diagonal False."""
        out = np.zeros(self._shape, bool)
        out[self._rows, self.targets] = seen
        return out

    def sense(self, data: mujoco.MjData, lidar: np.ndarray | None = None,
              seen: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``lidar``: optional ``[A, n_lidar]`` float32 C-contiguous array to write the
        ranges into, ``seen`` an optional ``[A, N - 1]`` bool one (both returned); new ones otherwise."""
        a, k = self._shape[0], self._k
        if lidar is None:
            lidar = np.empty((a, self._n_lidar), np.float32)
        if seen is None:
            seen = np.empty((a, k), np.bool_)
        if self.compiled_rays:  # one compiled call
            b = self._bound
            if not (b[0] is data and b[1] is seen and b[2] is lidar):  # bound to other arrays
                args = (data.xpos, data.geom_xpos, data.geom_xmat, data.qpos, *self._sense_args, seen, lidar)
                b = self._bound = (data, seen, lidar, kernels.bind(raycast.sense, *args), args)
            b[3](*b[4])
            return seen, lidar
        raycast.line_of_sight(data.xpos, data.geom_xpos, data.qpos, self._eye_ids, self._tgt_geom,
                              self._facing, self._cos_half, self._vec, self._dist, self._in_cone)
        ids, hit = self._ids, self._hit
        self.mujoco_rays(data, ids, hit)
        raycast.seen_and_lidar(ids, hit, self._dist, self._in_cone, self._geom_body, self._tgt_body,
                               self._lidar_range, seen, lidar)
        return seen, lidar
