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
All rays of an observer go through one ``mujoco.mj_multiRay`` call.
"""

from __future__ import annotations

import mujoco
import numpy as np

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
        self.targets = np.array([[j for j in range(n) if j != i] for i in range(a)], np.intp).reshape(a, k)
        """``[A, N - 1]`` target index (agents, then objects) of each observer's columns."""
        self._rows = np.repeat(np.arange(a), k).reshape(a, k)
        self._tgt_geom = np.asarray(index.geom, np.intp)[self.targets]  # [A, N - 1]
        self._tgt_body = np.asarray(index.body, np.int64)[self.targets]  # [A, N - 1]
        # geom id -> body id, with one extra entry so that "no hit" (-1) maps to -1
        self._body_of = np.append(model.geom_bodyid, -1).astype(np.int64)
        # One ray bundle per observer: N - 1 line-of-sight rays then L lidar rays.
        # Rows are contiguous views, written in place by mj_multiRay.
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
        self._los = self._vec[:, :k]  # [A, N - 1, 3] line-of-sight part (a view)
        self._sq = np.empty((a, k, 3))
        self._planar2 = np.empty((a, k))
        self._dist = np.empty((a, k))
        self.centre_dist = self._dist
        """``[A, N - 1]`` distances (m) from each agent's centre to the centre of each of its
        targets (columns as ``seen``) at the last ``sense``. Overwritten by the next."""
        self._shape = (a, n)

    def full(self, seen: np.ndarray) -> np.ndarray:
        """``[A, N]`` bool from ``[A, N - 1]`` ``seen``: column = target, the diagonal False."""
        out = np.zeros(self._shape, bool)
        out[self._rows, self.targets] = seen
        return out

    def sense(self, data: mujoco.MjData, lidar: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``lidar``: optional ``[A, n_lidar]`` float32 array to write the ranges into
        (returned); a new one otherwise."""
        k = self._k
        eyes = data.xpos[self._eye_sl]  # [A, 3] agent centres (a view: bodies 1..A)
        vec = self._los  # [A, N - 1, 3] view of the ray bundle
        np.subtract(data.geom_xpos[self._tgt_geom], eyes[:, None, :], out=vec)
        yaw = data.qpos[self._yaw_sl] + self._facing  # [A] direction of each agent's front
        sq = np.multiply(vec, vec, out=self._sq)
        planar2 = np.add(sq[..., 0], sq[..., 1], out=self._planar2)  # [A, N - 1]
        dist = np.sqrt(planar2 + sq[..., 2], out=self._dist)  # [A, N - 1]
        dot = vec[..., 0] * np.cos(yaw)[:, None]  # [A, N - 1] planar projection on the front
        dot += vec[..., 1] * np.sin(yaw)[:, None]
        in_cone = dot >= self._cos_half * np.sqrt(planar2) - 1e-9
        vec /= dist[..., None]

        ids, hit, groups, m = self._ids, self._hit, self._groups, self._model
        multi_ray, nray = mujoco.mj_multiRay, self._nray
        for eye, flat, body, ids_i, hit_i in zip(eyes, self._flat_rays, self._eye_bodies, ids, hit):
            multi_ray(m, data, eye, flat, groups, 1, body, ids_i, hit_i, None, nray, 1e6)
        los_ids = ids[:, :k]
        seen = hit[:, :k] >= dist - 1e-6  # the first hit lies beyond the target's centre
        seen |= self._body_of[los_ids] == self._tgt_body  # or belongs to the target's body
        seen |= los_ids < 0  # or nothing was hit
        seen &= in_cone
        if lidar is None:
            lidar = np.empty((len(ids), self._n_lidar), np.float32)
        lidar[...] = hit[:, k:]  # not capped, as released
        np.copyto(lidar, self._lidar_range, where=ids[:, k:] < 0)
        return seen, lidar
