"""What each agent sees: a 135-degree vision cone with line of sight, and a lidar ring.

Line of sight is one ray from the observer's centre to the target's centre (agent
centre, box centre, ramp centroid). Walls, boxes and ramps occlude; agents do not.
A target is visible when it is inside the cone (measured in the x-y plane) and the
first occluder the ray meets is the target itself or lies beyond the target's
centre. Lidar: ``n_lidar`` horizontal rays from the agent's centre, evenly spaced
and starting at its heading, hitting walls, boxes, ramps and other agents; ranges
in metres, ``lidar_range`` where nothing is hit. All ray casts go through
``mujoco.mj_multiRay``, two calls per observer.
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
        self._los_groups = _groups(GROUP_WALL, GROUP_BOX, GROUP_RAMP)
        self._lidar_groups = _groups(GROUP_WALL, GROUP_BOX, GROUP_RAMP, GROUP_AGENT)
        self._lidar_range = float(cfg.lidar_range)
        self._lidar_offsets = 2 * np.pi * np.arange(cfg.n_lidar) / cfg.n_lidar  # [L] rad
        self._n_lidar = cfg.n_lidar
        self._geom_body = model.geom_bodyid
        self._target_geom = index.geom[:n]  # [N]
        self._eye = np.eye(a, n, dtype=bool)
        # Reused buffers for the ray casts.
        self._ids = np.zeros(max(n, 1), np.int32)
        self._dist = np.zeros(max(n, 1), np.float64)
        self._lid_ids = np.zeros(cfg.n_lidar, np.int32)
        self._lid_dist = np.zeros(cfg.n_lidar, np.float64)
        self._lid_vec = np.zeros((cfg.n_lidar, 3), np.float64)

    def sense(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        idx, m = self._idx, self._model
        a, n = idx.n_agents, idx.n_agents + idx.n_objects
        bodies = idx.body
        eyes = data.xpos[bodies[:a]]  # [A, 3] agent centres
        targets = data.geom_xpos[self._target_geom]  # [N, 3]
        yaw = data.qpos[3 : 4 * a : 4]  # [A]
        heading = np.stack([np.cos(yaw), np.sin(yaw)], axis=1)  # [A, 2]

        vec = targets[None, :, :] - eyes[:, None, :]  # [A, N, 3]
        vec[self._eye] = (1.0, 0.0, 0.0)  # self: any unit vector, masked below
        dist = np.sqrt(np.einsum("ijk,ijk->ij", vec, vec))  # [A, N]
        unit = vec / dist[..., None]
        planar = np.hypot(vec[..., 0], vec[..., 1])
        along = np.einsum("ijk,ik->ij", vec[..., :2], heading)
        in_cone = along >= self._cos_half * planar - 1e-9
        in_cone &= ~self._eye

        visible = np.zeros((a, n), bool)
        lidar = np.empty((a, self._n_lidar), np.float32)
        ids, hit = self._ids, self._dist
        for i in range(a):
            body = int(bodies[i])
            cols = np.flatnonzero(in_cone[i])
            if cols.size:
                dirs = np.ascontiguousarray(unit[i, cols]).ravel()
                k = cols.size
                mujoco.mj_multiRay(m, data, eyes[i], dirs, self._los_groups, 1, body, ids[:k], hit[:k], None, k, 1e6)
                hid = ids[:k]
                clear = (hid < 0) | (hit[:k] >= dist[i, cols] - 1e-6) | (hid == self._target_geom[cols])
                visible[i, cols] = clear
            ang = yaw[i] + self._lidar_offsets
            lv = self._lid_vec
            lv[:, 0] = np.cos(ang)
            lv[:, 1] = np.sin(ang)
            mujoco.mj_multiRay(
                m, data, eyes[i], lv.ravel(), self._lidar_groups, 1, body,
                self._lid_ids, self._lid_dist, None, self._n_lidar, self._lidar_range,
            )
            d = self._lid_dist
            lidar[i] = np.where((self._lid_ids < 0) | (d > self._lidar_range), self._lidar_range, d)
        return visible, lidar
