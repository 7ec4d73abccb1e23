"""Per-agent observations, built for all agents at once as padded float32 arrays.

Every agent gets the same keys and shapes (one shared policy can serve all):

==================  ==========================  ===========================================
key                 shape                       content
==================  ==========================  ===========================================
``self``            ``[14]``                    ``SELF_FEATURES``
``agents``          ``[max_agents - 1, 13]``    other agents, ``AGENT_FEATURES``
``agents_mask``     ``[max_agents - 1]``        1 where that agent is visible to this one
``agents_present``  ``[max_agents - 1]``        1 where the padded slot holds a real agent
``boxes``           ``[max_boxes, 18]``         ``OBJECT_FEATURES``
``boxes_mask``      ``[max_boxes]``             visibility
``boxes_present``   ``[max_boxes]``             real slot
``ramps``           ``[max_ramps, 18]``         ``OBJECT_FEATURES``
``ramps_mask``      ``[max_ramps]``             visibility
``ramps_present``   ``[max_ramps]``             real slot
``lidar``           ``[n_lidar]``               ranges (m), first ray along the heading
==================  ==========================  ===========================================

Entity rows always hold the true state of every real entity: the policy must
attend only where ``*_mask`` is 1; an omniscient critic uses ``*_present``.
Positions and sizes in m, velocities in m/s and rad/s, angles as sin/cos of yaw;
``dx, dy`` are the entity's position minus the observer's. Padded rows are zeros.
"""

from __future__ import annotations

import numpy as np

from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.manipulation import NO_TEAM
from jaxsrl.envs.hide_and_seek.scene import SceneIndex

SELF_FEATURES = (
    "x", "y", "z", "sin_yaw", "cos_yaw", "vx", "vy", "vz", "wz",
    "is_hider", "is_seeker", "prep_elapsed", "time_elapsed", "is_holding",
)
"""``prep_elapsed``: fraction of the preparation phase elapsed (1 after it);
``time_elapsed``: fraction of the horizon elapsed."""
_BODY = ("x", "y", "z", "dx", "dy", "sin_yaw", "cos_yaw", "vx", "vy", "vz", "wz")
AGENT_FEATURES = _BODY + ("is_hider", "is_seeker")
OBJECT_FEATURES = _BODY + (
    "size_x", "size_y", "size_z", "locked_by_own_team", "locked_by_other_team", "held_by_self", "held_by_other",
)


def observation_shapes(cfg: HideAndSeekConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every observation key (without the agent axis)."""
    na, nb, nr = cfg.max_agents - 1, cfg.max_boxes, cfg.max_ramps
    return {
        "self": (len(SELF_FEATURES),),
        "agents": (na, len(AGENT_FEATURES)),
        "agents_mask": (na,),
        "agents_present": (na,),
        "boxes": (nb, len(OBJECT_FEATURES)),
        "boxes_mask": (nb,),
        "boxes_present": (nb,),
        "ramps": (nr, len(OBJECT_FEATURES)),
        "ramps_mask": (nr,),
        "ramps_present": (nr,),
        "lidar": (cfg.n_lidar,),
    }


class ObservationBuilder:
    """Builds ``{key: [A, *shape]}`` float32 arrays for the ``A`` agents of one episode."""

    def __init__(self, cfg: HideAndSeekConfig, index: SceneIndex, box_sizes: np.ndarray, ramp_size):
        self._cfg, self._idx = cfg, index
        self._shapes = observation_shapes(cfg)
        self._layout, offset = {}, 0  # key -> (offset, size, shape) in a flat [A, size] buffer
        for k, shp in self._shapes.items():
            n = int(np.prod(shp))
            self._layout[k] = (offset, n, shp)
            offset += n
        self._size = offset
        a, b, r = index.n_agents, index.n_boxes, index.n_ramps
        self._a = a
        # others[i] = every agent but i, in agent order: [A, A - 1]
        self.others = np.array([[j for j in range(a) if j != i] for i in range(a)], np.int64).reshape(a, a - 1)
        team = np.array([0] * index.n_hiders + [1] * index.n_seekers)
        self.team = team
        self._rows = np.arange(a)[:, None]  # [A, 1]
        self._team_onehot = np.stack([team == 0, team == 1], axis=1).astype(np.float32)  # [A, 2]
        self._sizes = np.concatenate([np.asarray(box_sizes).reshape(b, 3), np.tile(np.asarray(ramp_size), (r, 1))])
        self._obj_range = np.arange(b + r)
        self._b, self._r = b, r

    def build(
        self,
        qpos: np.ndarray,
        qvel: np.ndarray,
        visible: np.ndarray,
        lidar: np.ndarray,
        lock_team: np.ndarray,
        held: np.ndarray,
        step: int,
    ) -> dict[str, np.ndarray]:
        """Args: ``qpos``/``qvel`` ``[M, 4]`` (x, y, z, yaw) and velocities of the movable
        bodies, ``visible`` ``[A, A + O]`` bool, ``lidar`` ``[A, L]``, ``lock_team`` ``[O]``,
        ``held`` ``[A]``, ``step`` env steps taken."""
        cfg, a, b, r = self._cfg, self._a, self._b, self._r
        o = b + r
        sh = self._shapes
        base = np.empty((len(qpos), 9))  # x y z sin cos vx vy vz wz
        base[:, :3] = qpos[:, :3]
        base[:, 3] = np.sin(qpos[:, 3])
        base[:, 4] = np.cos(qpos[:, 3])
        base[:, 5:] = qvel
        xy = qpos[:a, :2]  # observer positions [A, 2]

        buf = np.zeros((a, self._size), np.float32)  # one allocation, split into views
        out = {k: buf[:, o : o + n].reshape((a,) + s) for k, (o, n, s) in self._layout.items()}
        s = out["self"]
        s[:, :9] = base[:a]
        s[:, 9:11] = self._team_onehot
        s[:, 11] = min(step / cfg.prep_steps, 1.0) if cfg.prep_steps > 0 else 1.0
        s[:, 12] = step / cfg.horizon
        s[:, 13] = held >= 0

        if a > 1:
            oth = self.others
            ag = out["agents"]
            ag[:, : a - 1, :3] = base[oth, :3]
            ag[:, : a - 1, 3:5] = qpos[oth, :2] - xy[:, None, :]
            ag[:, : a - 1, 5:11] = base[oth, 3:9]
            ag[:, : a - 1, 11:13] = self._team_onehot[oth]
            out["agents_mask"][:, : a - 1] = visible[self._rows, oth]
            out["agents_present"][:, : a - 1] = 1.0

        if o:
            feat = np.empty((a, o, len(OBJECT_FEATURES)), np.float32)
            obj = base[a:]
            feat[:, :, :3] = obj[None, :, :3]
            feat[:, :, 3:5] = qpos[None, a:, :2] - xy[:, None, :]
            feat[:, :, 5:11] = obj[None, :, 3:9]
            feat[:, :, 11:14] = self._sizes[None]
            locked = lock_team != NO_TEAM
            own = lock_team[None, :] == self.team[:, None]  # [A, O]
            feat[:, :, 14] = own
            feat[:, :, 15] = locked[None, :] & ~own
            mine = held[:, None] == self._obj_range[None, :]  # [A, O]
            n_holders = mine.sum(axis=0)
            feat[:, :, 16] = mine
            feat[:, :, 17] = (n_holders[None, :] - mine) > 0
            vis_obj = visible[:, a:]
            out["boxes"][:, :b] = feat[:, :b]
            out["boxes_mask"][:, :b] = vis_obj[:, :b]
            out["boxes_present"][:, :b] = 1.0
            out["ramps"][:, :r] = feat[:, b:]
            out["ramps_mask"][:, :r] = vis_obj[:, b:]
            out["ramps_present"][:, :r] = 1.0
        out["lidar"][:] = lidar
        return out
