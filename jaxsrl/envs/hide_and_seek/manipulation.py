"""Grab and lock as released (mae:wrappers/manipulation.py): grab on weld equalities,
lock on joint limits.

Reach (both actions): the distance from the agent's centre to the surface of the
object's cuboid (``dist_pt_to_cuboid``, mae:util/geometry.py:5-54) is at most
``grab_reach`` = 0.25 m (mae:hide_and_seek.py:245), and the object was visible in the
agent's last observation (mae:hide_and_seek.py:423-425; mae:manipulation.py:260-263).
A ramp's cuboid is its bounding box (0.5 m cube).

Grab (``GrabObjWrapper`` + ``GrabClosestWrapper``, mae:manipulation.py:83-154, 162-178):
re-decided every step. An agent pressing grab holds the closest object in reach; it
drops it when the object leaves reach or view, and switches when another becomes the
closest. Locked objects can be grabbed. Several agents may hold one object.

Lock (``all_lock_team_specific``, mae:manipulation.py:315-346, with ``LockAllWrapper``:
one button for every object in reach): a held state. Per object, let "deciders" be
the agents in reach that see it and belong to the team of its last locker (agent 0's
team before any lock). If a decider does not press lock, the object unlocks (or stays
unlocked); otherwise, if anyone in reach and seeing it presses lock, it locks (or stays
locked). A new lock's locker is drawn at random among the pressers (:343-344). So a
lock holds while a teammate near it keeps pressing, and only the locking team can
undo it. Ramps are lockable only if ``lock_ramp``. Locking sets the range of each of the
object's four joints to its current value and turns the limit on; unlocking turns it off
(``jnt_range``/``jnt_limited``, mae:manipulation.py:327-344). Velocities are not touched:
the limit constraint stops the object, as released.
"""

from __future__ import annotations

import mujoco
import numpy as np

from jaxsrl.envs.hide_and_seek import kernels
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
      locked: ``[O]`` bool, object locked.
      which_locked: ``[O]`` int, agent that locked it last (0 before any lock, as released).
      lock_team: ``[O]`` int, team of the locker of a locked object (-1 unlocked, 0 hiders, 1 seekers).
      lock_events: ``[2]`` int, new locks made by hiders and by seekers this episode.
    """

    def __init__(
        self,
        cfg: HideAndSeekConfig,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        index: SceneIndex,
        box_sizes: np.ndarray,
        rng: np.random.Generator,
    ):
        self._d, self._idx = data, index
        self._reach = float(cfg.grab_reach)
        a, o, b = index.n_agents, index.n_objects, index.n_boxes
        self.team = np.array([HIDER] * index.n_hiders + [SEEKER] * index.n_seekers, np.int64)
        self.held = np.full(a, -1, np.int64)
        self.locked = np.zeros(o, bool)
        self.which_locked = np.zeros(o, np.int64)
        self.lock_events = np.zeros(2, np.int64)
        self._half = np.concatenate(
            [np.asarray(box_sizes, np.float64).reshape(b, 3), np.tile(cfg.ramp_size, (index.n_ramps, 1))]
        ) / 2  # [O, 3]
        # Ramp bodies sit at the wedge's base: the cuboid centre is half its height above.
        self._centre_dz = np.concatenate([np.zeros(b), np.full(index.n_ramps, cfg.ramp_size[2] / 2)])
        # Bound for skipping: the cuboid surface is at least |p - geom centre| - |geom centre
        # - cuboid centre| - |half diagonal| from a point p (triangle inequality); the geom
        # centre sits at geom_pos in the body frame, the cuboid centre _centre_dz above the
        # body origin. 1e-6 m covers rounding.
        geom_off = np.linalg.norm(model.geom_pos[index.geom[a : a + o]], axis=1) if o else np.zeros(0)
        self.near_radius = self._reach + np.linalg.norm(self._half, axis=1) + geom_off + self._centre_dz + 1e-6
        """``[O]`` (m): an object whose geom centre is farther than this from an agent's centre
        is out of its reach."""
        self._lockable = np.concatenate([np.ones(b, bool), np.full(index.n_ramps, bool(cfg.lock_ramp))])
        self._agent_bodies = index.body[:a]
        self._obj_bodies = index.body[a : a + o]
        self._obj_joints = model.body_jntadr[self._obj_bodies][:, None] + np.arange(DOFS_PER_BODY)  # [O, 4]
        self._agent_ids = np.asarray(self._agent_bodies, np.int64)
        self._obj_ids = np.asarray(self._obj_bodies, np.int64)
        self._to_unlock, self._to_lock = np.zeros(o, bool), np.zeros(o, bool)
        self._target = np.empty(a, np.int64)
        self._dist = np.zeros((a, o))
        self._usable = np.zeros((a, o), bool)
        # kernels.manipulate's arguments after the buttons, seen and centre_dist: arrays
        # updated in place (the data's are views of it), fetched once
        self._decide_args = (self.near_radius, self._reach, data.xpos, data.xmat, self._agent_ids, self._obj_ids,
                             self._centre_dz, self._half, self._lockable, self.team, self.which_locked, self.locked,
                             self.held, self._dist, self._usable, self._to_unlock, self._to_lock, self._target)
        self._bound: tuple = (None,) * 4  # (grab, lock, seen, centre_dist, kernels.manipulate bound to them, its arguments)
        # views of the model's and data's arrays that grab and lock edit (they outlive the episode)
        self._jnt_limited, self._jnt_range, self._eq_data = model.jnt_limited, model.jnt_range, model.eq_data
        self._eq_active = data.eq_active
        self._obj_qposadr = model.jnt_qposadr[self._obj_joints]  # [O, 4]
        self._weld_bodies = [int(b) for b in index.body]  # agents, then objects
        self.reset(rng)

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode on the same scene and box sizes: nothing held or locked (the
        model's welds and limits are ``SceneCache.layout``'s to clear); ``rng`` draws lockers."""
        self._rng = rng
        self.held.fill(-1)
        self.locked.fill(False)
        self.which_locked.fill(0)
        self.lock_events.fill(0)
        self._dist.fill(0.0)
        self._usable.fill(False)
        self._to_unlock.fill(False)
        self._to_lock.fill(False)

    @property
    def lock_team(self) -> np.ndarray:
        return np.where(self.locked, self.team[self.which_locked], NO_TEAM)

    def distances(self) -> np.ndarray:
        """``[A, O]`` agent centre -> object cuboid surface (m), at the current kinematics."""
        idx, d = self._idx, self._d
        if idx.n_objects == 0:
            return np.zeros((idx.n_agents, 0))
        dist = np.empty((idx.n_agents, idx.n_objects))
        kernels.cuboid_distances(d.xpos, d.xmat, self._agent_ids, self._obj_ids, self._centre_dz, self._half, dist)
        return dist

    def apply(self, grab: np.ndarray, lock: np.ndarray, seen: np.ndarray, centre_dist: np.ndarray) -> None:
        """Update grab welds and lock limits before the physics step.

        Args:
          grab: ``[A]`` bool grab actions (already False for frozen agents).
          lock: ``[A]`` bool lock actions (already False for frozen agents).
          seen: ``[A, A - 1 + O]`` bool, what each agent saw in its last observation
            (``Vision``: the objects are the last ``O`` columns).
          centre_dist: ``[A, A - 1 + O]`` distances (m) from each agent's centre to each
            target's geom centre at the current kinematics, columns as ``seen`` (vision
            computes them). Where every seen object is farther than reach + the object's
            bounding radius (``near_radius``), none is in reach and the exact distances
            are skipped.

        The decisions are one compiled call (``kernels.manipulate``); Python edits the
        model only where a lock or a grab changes.
        """
        b = self._bound
        if not (b[0] is grab and b[1] is lock and b[2] is seen and b[3] is centre_dist):  # bound to other arrays
            args = (grab, lock, seen, centre_dist, *self._decide_args)
            b = self._bound = (grab, lock, seen, centre_dist, kernels.bind(kernels.manipulate, *args), args)
        lock_change, grab_change = b[4](*b[5])
        if lock_change:
            self._lock(lock, self._usable)
        if grab_change:
            self._grab()

    def _lock(self, lock: np.ndarray, usable: np.ndarray) -> None:
        """Apply ``kernels.lock_changes``' decision (in ``_to_unlock``, ``_to_lock``)."""
        to_unlock, to_lock, locked = self._to_unlock, self._to_lock, self.locked
        limited, ranges, qpos = self._jnt_limited, self._jnt_range, self._d.qpos
        for obj in np.flatnonzero(to_unlock & locked).tolist():
            limited[self._obj_joints[obj]] = False
        for obj in np.flatnonzero(to_lock & ~locked).tolist():
            pressers = np.flatnonzero(usable[:, obj] & lock)
            who = int(pressers[self._rng.integers(0, len(pressers))])  # = rng.choice(pressers)
            self.which_locked[obj] = who
            self.lock_events[self.team[who]] += 1
            joints = self._obj_joints[obj]
            ranges[joints] = qpos[self._obj_qposadr[obj]][:, None]
            limited[joints] = True
        locked[:] = (locked & ~to_unlock) | to_lock  # in place: _decide_args holds it

    def _grab(self) -> None:
        """Move the welds to ``kernels.manipulate``'s grab targets (in ``_target``): weld
        ``agent * O + obj`` (``SceneIndex.grab_eq``) on, its pose the object's in the agent's
        frame (``_relpose``)."""
        target, held, n_obj = self._target, self.held, self._idx.n_objects
        active, eq_data, bodies = self._eq_active, self._eq_data, self._weld_bodies
        for i in np.flatnonzero(target != held).tolist():
            was, obj = int(held[i]), int(target[i])
            if was >= 0:
                active[i * n_obj + was] = 0
            if obj >= 0:
                e = i * n_obj + obj
                eq_data[e, :3] = 0.0
                eq_data[e, 3:10] = _relpose(self._d, bodies[i], bodies[self._idx.n_agents + obj])
                active[e] = 1
            held[i] = obj
