"""Grab and lock: weld equalities switched on and off between physics steps.

Grab (per agent, held while the grab action is 1): on the first step with grab = 1
the agent welds itself, at the current relative pose, to the nearest object that it
saw in its last observation, that is not locked and whose surface is within
``grab_reach`` of the agent's surface (``mj_geomDistance``). Grab = 0 releases it.

Lock (per agent, on the rising edge of the lock action, 0 -> 1): the nearest object
seen in the last observation within ``grab_reach`` that is unlocked or locked by the
agent's own team is toggled: an unlocked object is welded to the world where it
stands (its velocity zeroed, anyone holding it lets go), an own-team lock is
released. Objects locked by the other team are not candidates, so only the locking
team can unlock. The edge trigger keeps a held lock button from toggling every step.
"""

from __future__ import annotations

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.scene import DOFS_PER_BODY, SceneIndex

NO_TEAM = -1
HIDER, SEEKER = 0, 1


def _relpose(data: mujoco.MjData, b1: int, b2: int) -> np.ndarray:
    """``[7]`` pose (pos, quat) of body ``b2`` in the frame of body ``b1`` (weld relpose)."""
    inv = np.empty(4)
    mujoco.mju_negQuat(inv, data.xquat[b1])
    out = np.empty(7)
    mujoco.mju_rotVecQuat(out[:3], data.xpos[b2] - data.xpos[b1], inv)
    mujoco.mju_mulQuat(out[3:], inv, data.xquat[b2])
    return out


class Manipulation:
    """Grab/lock state of one episode.

    Attributes:
      held: ``[A]`` int, object held by each agent (-1: none); objects are boxes then ramps.
      lock_team: ``[O]`` int, team that locked each object (-1 unlocked, 0 hiders, 1 seekers).
      lock_events: ``[2]`` int, locks made by hiders and by seekers this episode.
    """

    def __init__(self, cfg: HideAndSeekConfig, model: mujoco.MjModel, data: mujoco.MjData, index: SceneIndex):
        self._m, self._d, self._idx = model, data, index
        self._reach = float(cfg.grab_reach)
        a, o = index.n_agents, index.n_objects
        self.team = np.array([HIDER] * index.n_hiders + [SEEKER] * index.n_seekers, np.int64)
        self.held = np.full(a, -1, np.int64)
        self.lock_team = np.full(o, NO_TEAM, np.int64)
        self.lock_events = np.zeros(2, np.int64)
        self._prev_lock = np.zeros(a, bool)
        # Bounding radius of each object's geom, to skip exact distances for far objects.
        self._obj_geom = index.geom[a:]
        self._obj_rbound = model.geom_rbound[self._obj_geom] + cfg.agent_radius + self._reach

    def _gap(self, agent: int, obj: int) -> float:
        """Surface-to-surface distance (m), capped just above the reach."""
        idx = self._idx
        cap = self._reach + 0.01
        g_agent, g_obj = int(idx.geom[agent]), int(idx.geom[idx.n_agents + obj])
        return mujoco.mj_geomDistance(self._m, self._d, g_agent, g_obj, cap, None)

    def _nearest(self, agent: int, candidates: np.ndarray) -> int:
        best, best_gap = -1, np.inf
        for obj in np.flatnonzero(candidates):
            gap = self._gap(agent, int(obj))
            if gap <= self._reach and gap < best_gap:
                best, best_gap = int(obj), gap
        return best

    def _release(self, agent: int) -> None:
        obj = self.held[agent]
        if obj >= 0:
            self._d.eq_active[self._idx.grab_eq(agent, int(obj))] = 0
            self.held[agent] = -1

    def apply(self, grab: np.ndarray, lock: np.ndarray, seen_objects: np.ndarray) -> None:
        """Update welds before the physics step.

        Args:
          grab: ``[A]`` bool grab actions (already False for frozen agents).
          lock: ``[A]`` bool lock actions (already False for frozen agents).
          seen_objects: ``[A, O]`` bool, objects visible in each agent's last observation.
        """
        idx, d, m = self._idx, self._d, self._m
        for i in np.flatnonzero(~grab & (self.held >= 0)):
            self._release(int(i))
        want_grab = grab & (self.held < 0)
        press = lock & ~self._prev_lock
        self._prev_lock = lock.copy()
        if not (want_grab.any() or press.any()):
            return
        gap = d.xpos[idx.body[: idx.n_agents], None, :] - d.geom_xpos[None, self._obj_geom, :]  # [A, O, 3]
        near = seen_objects & (np.einsum("ijk,ijk->ij", gap, gap) <= self._obj_rbound[None, :] ** 2)
        for i in np.flatnonzero(want_grab):
            obj = self._nearest(int(i), near[i] & (self.lock_team == NO_TEAM))
            if obj >= 0:
                e = idx.grab_eq(int(i), obj)
                m.eq_data[e, :3] = 0.0
                m.eq_data[e, 3:10] = _relpose(d, int(idx.body[i]), int(idx.body[idx.n_agents + obj]))
                d.eq_active[e] = 1
                self.held[i] = obj
        for i in np.flatnonzero(press):
            team = self.team[i]
            obj = self._nearest(int(i), near[i] & ((self.lock_team == NO_TEAM) | (self.lock_team == team)))
            if obj < 0:
                continue
            e = idx.lock_eq(obj)
            if self.lock_team[obj] == team:
                d.eq_active[e] = 0
                self.lock_team[obj] = NO_TEAM
                continue
            for j in np.flatnonzero(self.held == obj):
                self._release(int(j))
            body = int(idx.body[idx.n_agents + obj])
            m.eq_data[e, :3] = 0.0
            m.eq_data[e, 3:10] = _relpose(d, body, 0)
            d.eq_active[e] = 1
            k = DOFS_PER_BODY * (idx.n_agents + obj)
            d.qvel[k : k + DOFS_PER_BODY] = 0.0
            self.lock_team[obj] = team
            self.lock_events[team] += 1
