"""Per-agent observations as released, built for all agents at once as padded float32 arrays.

Every agent gets the same keys and shapes (one shared policy can serve all):

==================  ===========================  ==========================================
key                 shape                        content
==================  ===========================  ==========================================
``self``            ``[10]``                     ``self_features(cfg)``
``agents``          ``[max_agents - 1, 10]``     other agents, ``agent_features(cfg)``
``agents_mask``     ``[max_agents - 1]``         1 where that agent is visible to this one
``agents_present``  ``[max_agents - 1]``         1 where the padded slot holds a real agent
``boxes``           ``[max_boxes, 12 or 15]``    ``box_features(cfg)``
``boxes_mask``      ``[max_boxes]``              visibility
``boxes_present``   ``[max_boxes]``              real slot
``ramps``           ``[max_ramps, 9 or 15]``     ``ramp_features(cfg)``
``ramps_mask``      ``[max_ramps]``              visibility
``ramps_present``   ``[max_ramps]``              real slot
``lidar``           ``[n_lidar]``                ranges (m), world frame, ray 0 along +x
==================  ===========================  ==========================================

As released (mae:modules/agents.py:77-94, mae:multi_agent.py:86-106, mae:objects.py:107-211,
mae:manipulation.py:225-233, mae:prep_phase.py:32-36): agents give qpos and qvel of
their joints (x, y, z, raw yaw, vx, vy, vz, wz; z is 0 at rest), the ``hider`` flag and
the preparation timer ``prep_obs = min(1, t / (prep_steps + 1e-5))``; boxes give x, y, z
(0 at rest), cos and sin of yaw, vx, vy, vz, wz, their size when the game has elongated
boxes, and the lock flags ``you_locked``, ``team_locked``, ``obj_locked``; ramps the same
9, 3 zeros where boxes have a size, and the lock flags if ramps can be locked.
``extra_obs`` (off by default, a deviation) appends ``EXTRA_*`` columns.

Entity rows always hold the true state of every real entity: the policy must attend
only where ``*_mask`` is 1; an omniscient critic uses ``*_present``. Padded rows are zeros.
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from jaxsrl.envs.hide_and_seek import kernels
from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig
from jaxsrl.envs.hide_and_seek.scene import SceneIndex

_QPOS_QVEL = ("x", "y", "z", "yaw", "vx", "vy", "vz", "wz")
_OBJ_BODY = ("x", "y", "z", "cos_yaw", "sin_yaw", "vx", "vy", "vz", "wz")
_LOCKS = ("you_locked", "team_locked", "obj_locked")
EXTRA_SELF = ("sin_yaw", "cos_yaw", "time_elapsed", "is_holding")
"""``time_elapsed``: fraction of the horizon elapsed; ``is_holding``: 1 while grabbing."""
EXTRA_AGENT = ("dx", "dy", "sin_yaw", "cos_yaw")
"""``dx, dy``: the entity's position minus the observer's (m)."""
EXTRA_OBJECT = ("dx", "dy", "held_by_self", "held_by_other")


def self_features(cfg: HideAndSeekConfig) -> tuple[str, ...]:
    return _QPOS_QVEL + ("hider", "prep_obs") + (EXTRA_SELF if cfg.extra_obs else ())


def agent_features(cfg: HideAndSeekConfig) -> tuple[str, ...]:
    return _QPOS_QVEL + ("hider", "prep_obs") + (EXTRA_AGENT if cfg.extra_obs else ())


def box_features(cfg: HideAndSeekConfig) -> tuple[str, ...]:
    size = ("size_x", "size_y", "size_z") if cfg.n_elongated[1] > 0 else ()
    return _OBJ_BODY + size + _LOCKS + (EXTRA_OBJECT if cfg.extra_obs else ())


def ramp_features(cfg: HideAndSeekConfig) -> tuple[str, ...]:
    pad = ("pad_0", "pad_1", "pad_2") if cfg.n_elongated[1] > 0 else ()
    locks = _LOCKS if cfg.lock_ramp else ()
    return _OBJ_BODY + pad + locks + (EXTRA_OBJECT if cfg.extra_obs else ())


def observation_shapes(cfg: HideAndSeekConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every observation key (without the agent axis)."""
    na, nb, nr = cfg.max_agents - 1, cfg.max_boxes, cfg.max_ramps
    return {
        "self": (len(self_features(cfg)),),
        "agents": (na, len(agent_features(cfg))),
        "agents_mask": (na,),
        "agents_present": (na,),
        "boxes": (nb, len(box_features(cfg))),
        "boxes_mask": (nb,),
        "boxes_present": (nb,),
        "ramps": (nr, len(ramp_features(cfg))),
        "ramps_mask": (nr,),
        "ramps_present": (nr,),
        "lidar": (cfg.n_lidar,),
    }


def wire_bits(cfg: HideAndSeekConfig) -> dict:
    """The columns of each observation key that only ever hold ``0.0`` or ``1.0`` (key ->
    ``None`` for every column, or last-axis columns): the visibility masks, the present
    slots, the ``hider`` flags, the lock flags, the ramps' padding and the extra ``held_by``
    flags. Actors send them as bits (:mod:`jaxsrl.streams.obs_pack`, which checks every
    value it packs)."""
    def cols(features, names):
        return tuple(i for i, f in enumerate(features) if f in names)
    flags = {"hider", "you_locked", "team_locked", "obj_locked", "pad_0", "pad_1", "pad_2",
             "held_by_self", "held_by_other"}
    out = {k: None for k in ("agents_mask", "agents_present", "boxes_mask", "boxes_present",
                             "ramps_mask", "ramps_present")}
    for key, features in (("self", self_features(cfg)), ("agents", agent_features(cfg)),
                          ("boxes", box_features(cfg)), ("ramps", ramp_features(cfg))):
        out[key] = cols(features, flags)
    return out


_WRITTEN = ("self", "agents", "agents_mask", "boxes", "boxes_mask", "ramps", "ramps_mask", "lidar")
"""The keys ``kernels.build_observations`` writes, in its argument order."""
_written = itemgetter(*_WRITTEN)


class ObservationBuilder:
    """Builds ``{key: [A, *shape]}`` float32 arrays for the ``A`` agents of one episode.

    ``new()`` gives a new copy of each key's per-episode template, which already holds
    what a step cannot change (the ``hider`` flags, the ``*_present`` slots, box sizes);
    ``build`` writes the rest (every per-step column, the preparation timer included).

    Args:
      rest_z: ``[M]`` height (m) of each movable body at rest, subtracted from z.
    """

    def __init__(self, cfg: HideAndSeekConfig, index: SceneIndex, box_sizes: np.ndarray, rest_z: np.ndarray):
        self._cfg = cfg
        a, b, r = index.n_agents, index.n_boxes, index.n_ramps
        self._a, self._b = a, b
        # others[i] = every agent but i, in agent order: [A, A - 1]
        cols = np.arange(a - 1)
        self.others = cols + (cols >= np.arange(a)[:, None])
        self.team = np.array([0] * index.n_hiders + [1] * index.n_seekers, np.int64)
        self._hider = (self.team == 0).astype(np.float32)  # [A]
        self._box_sizes = np.asarray(box_sizes, np.float64).reshape(b, 3)
        self._rest_z = np.asarray(rest_z, np.float64)
        self._size_cols = 3 if cfg.n_elongated[1] > 0 else 0
        self._prep_den = cfg.prep_steps + 1e-5  # prep_obs = min(1, t / (prep_steps + 1e-5))
        self._lock_ramp, self._extra, self._horizon = bool(cfg.lock_ramp), bool(cfg.extra_obs), cfg.horizon
        self._out: tuple = (None, ())  # (the last ``out`` of build, its arrays in _WRITTEN order)
        self._own_build = None  # kernels.build_observations bound to the arguments of build(own=True)
        self._rows_build: tuple = (None, None, None)  # (out, rows' type fingerprint, the loop bound to them)
        t = {k: np.zeros((a,) + shape, np.float32) for k, shape in observation_shapes(cfg).items()}
        self._keys, self._templates = list(t), list(t.values())
        t["self"][:, 8] = self._hider
        if a > 1:
            t["agents"][:, : a - 1, 8] = self._hider[self.others]
            t["agents_present"][:, : a - 1] = 1.0
        t["boxes_present"][:, :b] = 1.0
        t["ramps_present"][:, :r] = 1.0
        if b and self._size_cols:
            t["boxes"][:, :b, 9:12] = self._box_sizes[None]

    def new(self) -> dict[str, np.ndarray]:
        """Fresh ``{key: [A, *shape]}`` arrays holding the constant parts, the rest zero
        (fill with ``build(..., out=...)``)."""
        return dict(zip(self._keys, map(np.ndarray.copy, self._templates)))

    def build(self, qpos, qvel, seen, lidar, locked, which_locked, held, step: int, out: dict[str, np.ndarray],
              rows: np.ndarray, own: bool = False) -> None:
        """Write the per-step columns of the observation after ``step`` env steps.

        Args: ``qpos``/``qvel`` ``[M, 4]`` (x, y, z, yaw) and velocities of the movable
        bodies, ``seen`` ``[A, A - 1 + O]`` bool (row ``i``: the other agents in agent order,
        then the objects; ``Vision``), ``lidar`` ``[A, L]`` float32, ``locked`` ``[O]`` bool,
        ``which_locked`` ``[O]`` agent index, ``held`` ``[A]``, ``step`` env steps taken,
        ``out`` ``{key: [R, *shape]}`` float32 arrays whose rows ``rows`` (``[A]`` int64)
        already hold this episode's constant parts (``new()``, or an earlier observation
        of the episode): agent ``i``'s observation is written in row ``rows[i]``.
        ``own``: ``out`` is ``new()``'s and every other array is of the kinds of the last such
        call (the env's step), so the compiled loop bound to them (``kernels.bind``) serves;
        else it is bound again when ``out`` is another dict or ``rows`` of another type.
        """
        if out is not self._out[0]:  # the arrays of the same dict are fetched once
            self._out = (out, _written(out))
        args = (qpos, qvel, self._rest_z, seen, self.others, self.team, locked, which_locked, held,
                self._b, self._size_cols, self._lock_ramp, self._extra, step / self._horizon,
                min(1.0, step / self._prep_den), lidar, rows, *self._out[1])
        if own:  # new()'s arrays
            if self._own_build is None:
                self._own_build = kernels.bind(kernels.build_observations, *args)
            self._own_build(*args)
            return
        rows_type = kernels.type_key(rows)
        bound = self._rows_build
        if bound[0] is not out or bound[1] != rows_type or rows_type is None:  # a dict holds the same arrays
            bound = self._rows_build = (out, rows_type, kernels.bind(kernels.build_observations, *args))
        bound[2](*args)
