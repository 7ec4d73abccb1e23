"""``HideAndSeekEnv``: the hide-and-seek game of Baker et al. 2019 as a PettingZoo
``ParallelEnv`` on MuJoCo.

Agents are named ``hider_0 .. hider_{H-1}`` and ``seeker_0 .. seeker_{S-1}``;
``possible_agents`` lists the configured maxima, ``agents`` the ones of the current
episode (the full variant samples 1-3 of each). All agents share one observation
space (a ``Dict`` of float32 ``Box``es, see ``observations.py``) and the action space
``MultiDiscrete([11, 11, 11, 2, 2])``: force x, force y, torque z bins over
``[-0.9, 0.9]`` of the motor range (bin 5 is zero), grab, lock.

One ``step`` = 15 MuJoCo steps of 0.005 s. Rewards: after the preparation phase
hiders get +1 when no hider is seen by any seeker and -1 otherwise, seekers the
opposite; nothing during preparation. After it, an agent whose centre is outside the
bounds square gets ``-boundary_penalty`` instead, and in the quadrant game every agent
does while any box or ramp is outside (mae:limit_mvmnt.py:37-55). At the horizon every agent is truncated (never
terminated) and its info carries ``"episode_stats"`` (see ``stats.py``); call
``reset`` to start again. Every info has ``"in_prep_phase"``: whether the next step is
still in the preparation phase (as released, mae:prep_phase.py:42-44), and
``"discard_episode"``: True only on the step at which the physics failed beyond repair
(guard.py); that step truncates every agent with reward 0 and no ``"episode_stats"``.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from jaxsrl.envs.hide_and_seek import kernels
from jaxsrl.envs.hide_and_seek.config import HideAndSeekConfig, make_config
from jaxsrl.envs.hide_and_seek.guard import GuardedStep
from jaxsrl.envs.hide_and_seek.layout import Layout, generate_layout
from jaxsrl.envs.hide_and_seek.manipulation import HIDER, SEEKER, Manipulation
from jaxsrl.envs.hide_and_seek.observations import ObservationBuilder, observation_shapes, wire_bits
from jaxsrl.envs.hide_and_seek.scene import DOFS_PER_BODY
from jaxsrl.envs.hide_and_seek.scene_cache import SceneCache
from jaxsrl.envs.hide_and_seek.stats import EpisodeStats
from jaxsrl.envs.hide_and_seek.vision import Vision

ACTION_DIMS = ("force_x", "force_y", "torque_z", "grab", "lock")
_REWARD_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # step_rows' rewards: native float32 or float64


class HideAndSeekEnv(ParallelEnv):
    """The hide-and-seek game. Build with ``make_env(variant, **overrides)``.

    Args:
      config: the game's knobs (default: the quadrant variant).
      render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns ``[H, W, 3]`` uint8).
    """

    metadata = {"name": "hide_and_seek_v0", "render_modes": ["rgb_array"], "render_fps": 13, "is_parallelizable": True}

    def __init__(self, config: HideAndSeekConfig | None = None, render_mode: str | None = None):
        cfg = (config or HideAndSeekConfig()).validate()
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.config = cfg
        self.render_mode = render_mode
        self.possible_agents = [f"hider_{i}" for i in range(cfg.max_hiders)] + [
            f"seeker_{i}" for i in range(cfg.max_seekers)
        ]
        self.agents: list[str] = []
        obs_space = spaces.Dict(
            {
                k: spaces.Box(0.0, 1.0, s, np.float32)
                if k.endswith(("_mask", "_present"))
                else spaces.Box(-np.inf, np.inf, s, np.float32)
                for k, s in observation_shapes(cfg).items()
            }
        )
        nvec = [cfg.n_action_bins] * 3 + [2, 2]
        self.observation_spaces = {a: obs_space for a in self.possible_agents}
        self.wire_bits = wire_bits(cfg)  # boolean columns, sent as bits (jaxsrl.streams.obs_pack)
        self.action_spaces = {a: spaces.MultiDiscrete(nvec) for a in self.possible_agents}
        self._noop = np.array([cfg.n_action_bins // 2] * 3 + [0, 0], np.int64)
        self._bin_scale = 2 * cfg.action_max / (cfg.n_action_bins - 1)
        self._prep_steps = cfg.prep_steps
        self._rng = np.random.default_rng()
        self._scenes = SceneCache(cfg)
        self._rows_bound: dict = {}  # step_rows' compiled loops by its arrays' type fingerprints (_row_kernels)
        self._obs_shapes = observation_shapes(cfg)
        self._obs_checked: tuple = (None, 0)  # (the last obs dict step_rows checked, its arrays' fewest rows)
        self._model: mujoco.MjModel | None = None
        self._data: mujoco.MjData | None = None
        self.layout: Layout | None = None
        self._t = 0

    # --- PettingZoo API -------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.MultiDiscrete:
        return self.action_spaces[agent]

    def team_of(self, agent: str) -> str:
        """``"hider"`` or ``"seeker"``."""
        if agent not in self.possible_agents:
            raise KeyError(f"unknown agent {agent!r}")
        return agent.split("_")[0]

    @property
    def model(self) -> mujoco.MjModel | None:
        """The MuJoCo model of the current episode: one per team and object counts, laid
        out anew at every reset (``scene_cache.py``); wall geoms beyond the layout's are off."""
        return self._model

    @property
    def data(self) -> mujoco.MjData | None:
        """The MuJoCo data of the current episode; ``qpos.reshape(-1, 4)`` rows are
        (x, y, z, yaw) of hiders, seekers, boxes, ramps."""
        return self._data

    @property
    def held(self) -> np.ndarray:
        """``[A]`` object (boxes then ramps) each agent of the episode holds, -1 for none."""
        return self._manip.held.copy()

    @property
    def lock_team(self) -> np.ndarray:
        """``[O]`` team that holds each object locked: -1 unlocked, 0 hiders, 1 seekers."""
        return self._manip.lock_team

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode. ``options={"layout": Layout}`` replaces the random layout.

        Returns ``(observations, infos)`` keyed by the episode's agents.
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        layout = (options or {}).get("layout")
        if layout is None:
            layout = generate_layout(self.config, self._rng)
        self._setup(layout)
        batch = self._builder.new()
        self._observe(batch, self._own_rows, True)
        return self._per_agent(batch, self.agents), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        """Advance 0.075 s. ``actions[agent]``: 5 ints (see ``ACTION_DIMS``); missing
        agents do nothing. Returns ``(obs, rewards, terminations, truncations, infos)``,
        all new objects (the observation arrays too: a caller may keep them)."""
        agents = self.agents
        if not agents:
            raise RuntimeError("episode is over: call reset()")
        acts, noop, get = self._acts, self._noop, actions.get  # acts: [A, 5], overwritten every step
        for i, name in enumerate(agents):
            act = get(name)
            acts[i] = noop if act is None else act
        batch, rew = self._builder.new(), self._rew
        last = self._advance(acts, self._own_rows, batch, rew, True)  # the infos if the episode ended
        infos = self._infos(agents, False, True) if last is None else dict(zip(agents, last))
        return (self._per_agent(batch, agents), dict(zip(agents, rew.tolist())), dict.fromkeys(agents, False),
                dict.fromkeys(agents, last is not None), infos)

    def step_rows(self, actions: np.ndarray, rows: np.ndarray, obs: dict[str, np.ndarray],
                  reward: np.ndarray) -> list[dict] | None:
        """``step`` on a vectorised actor's arrays (``MultiAgentVectorEnv`` uses it when an
        env has it): agent ``agents[i]`` is row ``rows[i]`` of a group's arrays, written in
        place; no per-agent dicts, and infos only when the episode ends.

        Args:
          actions: ``[R, 5]`` integer action bins; row ``rows[i]`` is ``agents[i]``'s.
          rows: ``[n]`` int64 (``n = len(agents)``).
          obs: ``{key: [R, *shape]}`` float32 (the keys of ``observation_space``); rows
            ``rows`` must hold an observation of this episode (the reset's, or the last
            step's): only the per-step columns are written. A dict passed again must hold
            the same, writable arrays (the arrays are looked up once per dict).
          reward: ``[R]`` float out; agent ``i``'s reward is written to ``reward[rows[i]]``.

        Returns:
          None while the episode goes on; when it ends (every agent truncated, never
          terminated: the horizon, or a physics failure), the ``n`` infos ``step`` gives
          then, after which ``reset`` is due.

        Raises:
          RuntimeError: the episode is over. ValueError (nothing stepped or written):
          ``actions`` not integer ``[R, 5]``, ``reward`` not float32 or float64 ``[R]``, ``rows`` not
          integer ``[n]``, either of them not in the machine's byte order; a row outside
          ``actions``, ``reward`` or an ``obs`` array, or two alike; an ``obs`` key missing, or its array
          not a writable float32 ``[R, *shape]`` of ``observation_space``'s shape.
        """
        if not self.agents:
            raise RuntimeError("episode is over: call reset()")
        for name, a in (("actions", actions), ("rows", rows), ("reward", reward)):
            if not isinstance(a, np.ndarray):
                raise ValueError(f"{name} must be a NumPy array, got {type(a).__name__}")
        if not isinstance(obs, dict):
            raise ValueError(f"obs must be a dict of NumPy arrays, got {type(obs).__name__}")
        if (actions.ndim != 2 or actions.shape[1] != len(ACTION_DIMS) or actions.dtype.kind not in "iu"
                or not actions.dtype.isnative):
            raise ValueError(f"actions must be a native-order integer array of shape [rows, {len(ACTION_DIMS)}], "
                             f"got {actions.dtype.str} {actions.shape}")
        if reward.ndim != 1 or reward.dtype not in _REWARD_DTYPES:  # what the compiled loops take
            raise ValueError(f"reward must be a native-order float32 or float64 array of shape [rows], got "
                             f"{reward.dtype.str} {reward.shape}")
        n = len(self.agents)
        if rows.ndim != 1 or rows.shape[0] != n or rows.dtype.kind not in "iu" or not rows.dtype.isnative:
            raise ValueError(f"rows must be a native-order integer array of shape [{n}] (the episode's agents), "
                             f"got {rows.dtype.str} {rows.shape}")
        limit = min(actions.shape[0], reward.shape[0], self._obs_rows(obs))
        if not kernels.rows_valid(rows, limit):  # the loops index without bounds checks
            raise ValueError(f"rows must be distinct and lie in 0..{limit - 1} (the rows of actions, reward and "
                             f"every obs array), got {rows.tolist()}")
        return self._advance(actions, rows, obs, reward)

    def _obs_rows(self, obs: dict[str, np.ndarray]) -> int:
        """The fewest rows of ``obs``' arrays, after checking each is a writable float32
        ``[R, *shape]`` of its key's shape (once per dict: a dict passed again holds the same
        arrays, as ``step_rows`` requires). Raises ValueError naming the first bad key."""
        if self._obs_checked[0] is obs:
            return self._obs_checked[1]
        rows = []
        for key, shape in self._obs_shapes.items():
            a = obs.get(key)
            if (not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != len(shape) + 1
                    or a.shape[1:] != shape or not a.flags.writeable):
                if a is None:
                    got = "missing"
                elif isinstance(a, np.ndarray):
                    got = f"{'' if a.flags.writeable else 'read-only '}{a.dtype} {a.shape}"
                else:
                    got = type(a).__name__
                raise ValueError(f"obs[{key!r}] must be a writable float32 array of shape "
                                 f"[rows, {', '.join(map(str, shape))}], got {got}")
            rows.append(a.shape[0])
        self._obs_checked = (obs, min(rows))
        return self._obs_checked[1]

    def _advance(self, actions: np.ndarray, rows: np.ndarray, obs: dict[str, np.ndarray],
                 reward: np.ndarray, own: bool = False) -> list[dict] | None:
        """``step_rows`` on arguments known to be valid; ``own``: they are ``step``'s own
        buffers (``_acts``, ``_own_rows``, ``_rew``, ``ObservationBuilder.new()``), whose
        types the compiled loops bound to them (``kernels.bind``) rely on."""
        in_prep = self._t < self._prep_steps  # seekers are frozen: no motion, no grab, no lock
        grab, lock = self._grab, self._lock
        controls, rewards = self._own_kernels if own else self._row_kernels(actions, rows, reward, in_prep)
        controls(actions, rows, *self._ctrl_args, in_prep, self._ctrl, grab, lock)
        m = self._manip
        m.apply(grab, lock, self._seen, self._vision.centre_dist)
        physics_ok = self._guard.step(self._n_substeps)
        mujoco.mj_kinematics(self._model, self._data)
        self._t += 1

        self._observe(obs, rows, own)
        q = self._qpos  # penalties replace the reward, and are zero in prep (mae:limit_mvmnt.py:44-55)
        rewards(q, self._seen, self._sign, self._idx.n_hiders, in_prep, *self._reward_args, rows, reward, m.held,
                self._stats.tally)
        if self._t == self._stats.snapshot_step:
            self._stats.snapshot(q, m.lock_team)
        if physics_ok and self._t < self._horizon:
            return None
        if not physics_ok:  # the solver failed twice: end here, marked for discard (guard.py)
            reward[rows] = 0.0
        agents, self.agents = self.agents, []
        return list(self._infos(agents, True, physics_ok).values())

    def _row_kernels(self, actions: np.ndarray, rows: np.ndarray, reward: np.ndarray, in_prep: bool) -> tuple:
        """``kernels.controls`` and ``kernels.rewards`` bound (``kernels.bind``) to the types of
        ``step_rows``' arrays, kept per their type fingerprints (every other argument is the
        env's own, of the same types in every scene). ``step_rows`` has checked that the
        three are native-order arrays of the kinds the loops take."""
        key = kernels.type_key(actions, rows, reward)
        pair = self._rows_bound.get(key)
        if pair is None:
            pair = self._rows_bound[key] = (
                kernels.bind(kernels.controls, actions, rows, *self._ctrl_args, in_prep, self._ctrl, self._grab,
                             self._lock),
                kernels.bind(kernels.rewards, self._qpos, self._seen, self._sign, self._idx.n_hiders, in_prep,
                             *self._reward_args, rows, reward, self._manip.held, self._stats.tally))
        return pair

    def _infos(self, agents: list[str], done: bool, physics_ok: bool) -> dict[str, dict]:
        """The infos of the step just taken, new dicts keyed by ``agents`` (the episode's)."""
        next_in_prep = self._t < self._prep_steps  # info['in_prep_phase'] as released (mae:prep_phase.py:42-44)
        infos = {a: {"in_prep_phase": next_in_prep, "discard_episode": not physics_ok} for a in agents}
        if done and physics_ok:
            m = self._manip
            stats = self._stats.summary(self._qpos, m.lock_team, m.lock_events)
            for info in infos.values():
                info["episode_stats"] = dict(stats)
        return infos

    def render(self) -> np.ndarray | None:
        """Top-down RGB image ``[H, W, 3]`` uint8 of the current state (None if
        ``render_mode`` is None)."""
        if self.render_mode is None or self._data is None:
            return None
        from jaxsrl.envs.hide_and_seek.render import render_topdown  # noqa: PLC0415  (PIL: rendering only)

        return render_topdown(
            self.config, self.layout, self._qpos, self._vision.full(self._seen), self._manip.lock_team, self._manip.held,
            self._idx.n_hiders, step=self._t, in_prep=self._t < self.config.prep_steps,
        )

    def close(self) -> None:
        self._model = self._data = None
        self.agents = []  # step refuses until reset
        self._scenes = SceneCache(self.config)

    # --- internals -------------------------------------------------------------------
    def _setup(self, layout: Layout) -> None:
        cfg = self.config
        if len(layout.hiders) > cfg.max_hiders or len(layout.seekers) > cfg.max_seekers:
            raise ValueError("layout has more agents than the config's maxima")
        if len(layout.boxes) > cfg.max_boxes or len(layout.ramps) > cfg.max_ramps:
            raise ValueError("layout has more objects than the config's maxima")
        if len(layout.hiders) < 1 or len(layout.seekers) < 1:
            raise ValueError("layout needs at least one hider and one seeker")
        model, data, idx = self._scenes.layout(layout)
        parts = self._scenes.memo.get(idx.n_walls)  # what this scene's episodes share
        if parts is None:
            parts = self._scenes.memo[idx.n_walls] = _SceneParts(cfg, model, data, idx)
        q = self._qpos = parts.qpos
        poses = np.concatenate([layout.hiders, layout.seekers, layout.boxes, layout.ramps])
        z = np.concatenate(
            [np.full(idx.n_agents, cfg.agent_radius), layout.box_sizes[:, 2] / 2, np.zeros(idx.n_ramps)]
        )
        q[:, 0:2] = poses[:, 0:2]
        q[:, 2] = z
        q[:, 3] = poses[:, 2]
        mujoco.mj_forward(model, data)
        self._model, self._data, self._idx, self.layout = model, data, idx, layout
        self._qvel = parts.qvel
        self._vision = parts.vision
        self._guard = parts.guard
        parts.guard.retries = 0
        sizes = layout.box_sizes.tobytes()  # the box sizes: the same for every quadrant episode
        if parts.sizes != sizes:
            parts.sizes = sizes
            parts.manip = Manipulation(cfg, model, data, idx, layout.box_sizes, self._rng)
            parts.builder = ObservationBuilder(cfg, idx, layout.box_sizes, z)
        else:
            parts.manip.reset(self._rng)
        self._manip, self._builder = parts.manip, parts.builder
        self._team = parts.team
        self.agents = list(parts.agents)
        self._t = 0
        self._stats = EpisodeStats(idx, cfg.prep_steps, q, self._team)
        # buffers every step writes before reading (the scene's, reused by its episodes)
        self._seen, self._acts, self._rew, self._own_rows = parts.seen, parts.acts, parts.rew, parts.own_rows
        self._lidar, self._grab, self._lock, self._ctrl = parts.lidar, parts.grab, parts.lock, parts.ctrl
        self._sign = parts.sign
        self._ctrl_args = (cfg.n_action_bins, self._bin_scale, cfg.action_max, idx.n_hiders)
        self._reward_args = (float(cfg.bounds_size / 2), bool(cfg.penalize_objects_out), float(cfg.boundary_penalty))
        self._n_substeps, self._horizon = cfg.n_substeps, cfg.horizon
        if parts.own_kernels is None:  # step's controls and rewards on its own buffers, bound once per scene
            parts.own_kernels = (
                kernels.bind(kernels.controls, self._acts, self._own_rows, *self._ctrl_args, False, self._ctrl,
                             self._grab, self._lock),
                kernels.bind(kernels.rewards, q, self._seen, self._sign, idx.n_hiders, False, *self._reward_args,
                             self._own_rows, self._rew, self._manip.held, self._stats.tally))
        self._own_kernels = parts.own_kernels

    @staticmethod
    def _per_agent(batch: dict[str, np.ndarray], agents: list[str]) -> dict[str, dict[str, np.ndarray]]:
        """PettingZoo's per-agent observations: row ``i`` of every key for ``agents[i]``."""
        keys = list(batch)  # zip(*values): each array's rows, as views
        return {name: dict(zip(keys, rows)) for name, rows in zip(agents, zip(*batch.values()))}

    def _observe(self, obs: dict[str, np.ndarray], rows: np.ndarray, own: bool = False) -> None:
        """Sense, and write the observation into rows ``rows`` of ``obs`` (``ObservationBuilder.build``;
        ``own``: ``obs`` is ``ObservationBuilder.new()``'s and ``rows`` is ``_own_rows``)."""
        m = self._manip
        self._seen, lidar = self._vision.sense(self._data, self._lidar, self._seen)
        self._builder.build(self._qpos, self._qvel, self._seen, lidar, m.locked, m.which_locked, m.held, self._t,
                            obs, rows, own)


class _SceneParts:
    """What the episodes of one laid-out scene (``SceneCache``: one model and ``MjData`` per
    team and object counts, here with ``index.n_walls`` walls in use) share: views of the
    data, the ray casts (``Vision``: built from the model's geoms alone), the physics guard,
    the step's buffers, each written by every step before it is read, and the grab/lock
    state and observation builder of the last box sizes (``Manipulation.reset`` per
    episode). Built at the scene's first episode and kept in ``SceneCache.memo``."""

    def __init__(self, cfg: HideAndSeekConfig, model: mujoco.MjModel, data: mujoco.MjData, index):
        n = DOFS_PER_BODY * len(index.body)
        a = index.n_agents
        self.qpos = data.qpos[:n].reshape(-1, DOFS_PER_BODY)  # views
        self.qvel = data.qvel[:n].reshape(-1, DOFS_PER_BODY)
        self.ctrl = data.ctrl.reshape(a, 3)  # 3 motors per agent, agent order
        self.vision = Vision(cfg, model, index)
        self.guard = GuardedStep(model, data, cfg.blowup_speed)
        self.team = np.array([HIDER] * index.n_hiders + [SEEKER] * index.n_seekers, np.int64)
        self.sign = np.where(self.team == HIDER, 1.0, -1.0)
        self.agents = [f"hider_{i}" for i in range(index.n_hiders)] + [f"seeker_{i}" for i in range(index.n_seekers)]
        self.seen = np.zeros((a, a - 1 + index.n_objects), bool)  # see Vision
        self.acts = np.empty((a, 5), np.int64)
        self.rew = np.empty(a)  # step's rewards, read out as floats every step
        self.own_rows = np.arange(a, dtype=np.int64)  # step's rows: agent order
        self.lidar = np.empty((a, cfg.n_lidar), np.float32)
        self.grab = np.empty(a, bool)
        self.lock = np.empty(a, bool)
        self.sizes: bytes | None = None  # box sizes (float64 bytes) of the grab/lock state and observation builder:
        self.manip: Manipulation | None = None  # Manipulation.reset for each episode with these sizes
        self.builder: ObservationBuilder | None = None
        self.own_kernels: tuple | None = None  # kernels.controls and .rewards bound to step's buffers


def make_env(variant: str = "quadrant", render_mode: str | None = None, **overrides: Any) -> HideAndSeekEnv:
    """A ``HideAndSeekEnv`` of a named variant (``"quadrant"`` or ``"full"``).

    Raises:
      ValueError: unknown variant or override key (named in the message).
    """
    return HideAndSeekEnv(make_config(variant, **overrides), render_mode=render_mode)
