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

    ``sense(data)`` returns ``(visible, lidar)``:
      visible: ``[A, A + O]`` bool, row = observer agent, columns = agents then objects
        (boxes, ramps); the diagonal is False.
      lidar: ``[A, n_lidar]`` float32 ranges (m).
    ``data`` must have up-to-date kinematics (``mj_kinematics`` or ``mj_forward``).
    """

    def __init__(self, cfg: HideAndSeekConfig, model: mujoco.MjModel, index: SceneIndex):
        self._model = model
        self._idx = index
        a, n = index.n_agents, index.n_agents + index.n_objects
        self._cos_half = float(np.cos(np.deg2rad(cfg.vision_cone_deg) / 2))
        solid = (GROUP_BOX, GROUP_RAMP, GROUP_AGENT) + ((GROUP_WALL,) if cfg.rays_hit_walls else ())
        self._groups = _groups(*solid)
        self._lidar_range = float(cfg.lidar_range)
        angles = 2 * np.pi * np.arange(cfg.n_lidar) / cfg.n_lidar  # [L] rad from +x
        self._lidar_cos, self._lidar_sin = np.cos(angles), np.sin(angles)
        self._n_lidar = cfg.n_lidar
        self._geom_body = model.geom_bodyid
        self._target_geom = index.geom[:n]  # [N]
        self._target_body = index.body[:n]  # [N]
        # geom id -> body id, with one extra entry so that "no hit" (-1) maps to -1
        self._body_of = np.append(model.geom_bodyid, -1).astype(np.int64)
        self._facing = float(np.deg2rad(cfg.facing_offset_deg))
        self._eye = np.eye(a, n, dtype=bool)
        # One ray bundle per observer: N line-of-sight rays then L lidar rays.
        # Rows are contiguous views, written in place by mj_multiRay.
        self._vec = np.zeros((a, n + cfg.n_lidar, 3), np.float64)
        self._ids = np.zeros((a, n + cfg.n_lidar), np.int32)
        self._hit = np.zeros((a, n + cfg.n_lidar), np.float64)
        self._vec[:, n:, 0] = self._lidar_cos[None, :]  # world frame: ray 0 along +x, fixed
        self._vec[:, n:, 1] = self._lidar_sin[None, :]
        self._diag = (np.arange(a), np.arange(a))
        self._not_eye = ~self._eye
        self._flat_rays = [self._vec[i].reshape(-1) for i in range(a)]  # views
        self._eye_bodies = [int(b) for b in index.body[:a]]
        eye_ids = np.asarray(index.body[:a], np.intp)
        contiguous = a > 0 and np.array_equal(eye_ids, eye_ids[0] + np.arange(a))
        self._eye_sl = slice(int(eye_ids[0]), int(eye_ids[0]) + a) if contiguous else eye_ids
        self._yaw_sl = slice(3, 4 * a, 4)
        self._n, self._nray = n, n + cfg.n_lidar
        self._los = self._vec[:, :n]  # [A, N, 3] line-of-sight part (a view)
        self._sq = np.empty((a, n, 3))
        self._planar2 = np.empty((a, n))
        self._dist = np.empty((a, n))
        self.centre_dist = self._dist
        """``[A, N]`` distances (m) from each agent's centre to each target's centre (agents,
        boxes, ramps) at the last ``sense``; 1 on the diagonal. Overwritten by the next."""
        self._target_body = self._target_body.astype(np.int64)

    def sense(self, data: mujoco.MjData, lidar: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``lidar``: optional ``[A, n_lidar]`` float32 array to write the ranges into
        (returned); a new one otherwise."""
        n = self._n
        eyes = data.xpos[self._eye_sl]  # [A, 3] agent centres (a view: bodies 1..A)
        targets = data.geom_xpos[self._target_geom]  # [N, 3]
        yaw = data.qpos[self._yaw_sl] + self._facing  # [A] direction of each agent's front

        vec = self._los  # [A, N, 3] view of the ray bundle
        np.subtract(targets[None, :, :], eyes[:, None, :], out=vec)
        vec[self._diag] = (1.0, 0.0, 0.0)  # self: any unit vector, masked below
        sq = np.multiply(vec, vec, out=self._sq)
        planar2 = np.add(sq[..., 0], sq[..., 1], out=self._planar2)  # [A, N]
        dist = np.sqrt(planar2 + sq[..., 2], out=self._dist)  # [A, N]
        dot = vec[..., 0] * np.cos(yaw)[:, None]  # [A, N] planar projection on the front
        dot += vec[..., 1] * np.sin(yaw)[:, None]
        in_cone = dot >= self._cos_half * np.sqrt(planar2) - 1e-9
        vec /= dist[..., None]

        ids, hit, groups, m = self._ids, self._hit, self._groups, self._model
        multi_ray, nray = mujoco.mj_multiRay, self._nray
        for eye, flat, body, ids_i, hit_i in zip(eyes, self._flat_rays, self._eye_bodies, ids, hit):
            multi_ray(m, data, eye, flat, groups, 1, body, ids_i, hit_i, None, nray, 1e6)
        los_ids, los_hit = ids[:, :n], hit[:, :n]
        clear = los_hit >= dist - 1e-6
        clear |= self._body_of[los_ids] == self._target_body  # the first hit is the target's body
        clear |= los_ids < 0  # nothing hit
        clear &= in_cone
        clear &= self._not_eye
        if lidar is None:
            lidar = np.empty((len(ids), self._n_lidar), np.float32)
        lidar[...] = hit[:, n:]  # not capped, as released
        np.copyto(lidar, self._lidar_range, where=ids[:, n:] < 0)
        return clear, lidar
