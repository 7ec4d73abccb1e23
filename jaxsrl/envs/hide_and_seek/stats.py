"""Per-episode statistics: the quantities by which Baker et al. tell the emergent phases
apart (object movement in the preparation phase and overall, locking by team, how
often hiders are seen). ``EpisodeStats.summary`` returns a flat ``dict[str, float]``.

Keys (distances in m; displacements are 3-D norms of the position change since the
episode start, as released: ``np.linalg.norm(obs['box_pos'] - box_pos_start)``,
mae:hide_and_seek.py:57-78): ``{box,ramp}_move_{prep,end}_{mean,max}``,
``{boxes,ramps}_locked_{hiders,seekers}_{prep,end}`` (objects locked at the "prep"
snapshot / at the end of the episode). The "prep" snapshot is taken, as released
(mae:hide_and_seek.py:60-62), after the first step at which the preparation timer
``min(1, t / (prep_steps + 1e-5))`` reads 1.0, i.e. after step ``prep_steps + 1`` (33 of 80),
the first step in which seekers could act. ``max_box_move_prep`` of the original is
``box_move_prep_max``, ``num_box_lock_prep`` is the sum of the two ``boxes_locked_*_prep``.
Also:
``lock_events_{hiders,seekers}``, ``hider_seen_fraction`` (post-preparation steps in
which some hider was seen), ``{hider,seeker}_team_return`` (team reward summed over
the episode, penalties excluded), ``{hider,seeker}_holding_fraction`` (agent-steps
spent holding an object), ``agent_out_steps``, ``episode_length``, ``n_hiders``,
``n_seekers``, ``n_boxes``, ``n_ramps``.
"""

from __future__ import annotations

import numpy as np

from jaxsrl.envs.hide_and_seek import kernels
from jaxsrl.envs.hide_and_seek.manipulation import HIDER, SEEKER
from jaxsrl.envs.hide_and_seek.scene import SceneIndex


class EpisodeStats:
    """Statistics of one episode; ``qpos`` arguments are ``[M, 4]``.

    The per-step counts are added by the compiled reward step (``kernels.rewards``) to
    ``tally``; the env calls ``snapshot`` after step ``snapshot_step``, ``summary`` at the end.
    """

    def __init__(self, index: SceneIndex, prep_steps: int, qpos: np.ndarray, team: np.ndarray):
        """``team``: ``[A]`` team of each agent (0 hiders, 1 seekers)."""
        self._idx = index
        self._start = qpos[index.n_agents :, :3].copy()  # [O, 3]
        self.snapshot_step = int(np.ceil(prep_steps + 1e-5))
        """The first t with min(1, t / (prep_steps + 1e-5)) == 1.0 (mae:prep_phase.py:32-36)."""
        self._prep_move = np.zeros(index.n_objects)
        self._prep_locks: np.ndarray | None = None
        self.tally = np.zeros(kernels.TALLY + index.n_agents)
        """``[TALLY + A]`` float64 counts (``kernels.rewards``)."""
        self._team = team

    def _move(self, qpos: np.ndarray) -> np.ndarray:
        delta = qpos[self._idx.n_agents :, :3] - self._start
        return np.sqrt(np.einsum("ij,ij->i", delta, delta))

    @staticmethod
    def _locks(lock_team: np.ndarray, lo: int, hi: int) -> tuple[float, float]:
        part = lock_team[lo:hi]
        return float(np.sum(part == HIDER)), float(np.sum(part == SEEKER))

    def snapshot(self, qpos: np.ndarray, lock_team: np.ndarray) -> None:
        """The "prep" snapshot: object displacements and ``[O]`` lock teams after step ``snapshot_step``."""
        self._prep_move = self._move(qpos)
        self._prep_locks = np.array(lock_team)

    def summary(self, qpos: np.ndarray, lock_team: np.ndarray, lock_events: np.ndarray) -> dict[str, float]:
        idx = self._idx
        b = idx.n_boxes
        end_move = self._move(qpos)
        prep_locks = self._prep_locks if self._prep_locks is not None else np.full_like(lock_team, -1)
        out: dict[str, float] = {}
        for name, sl in (("box", slice(0, b)), ("ramp", slice(b, idx.n_objects))):
            for phase, move in (("prep", self._prep_move), ("end", end_move)):
                part = move[sl]
                out[f"{name}_move_{phase}_mean"] = float(part.mean()) if part.size else 0.0
                out[f"{name}_move_{phase}_max"] = float(part.max()) if part.size else 0.0
        for name, lo, hi in (("boxes", 0, b), ("ramps", b, idx.n_objects)):
            for phase, locks in (("prep", prep_locks), ("end", lock_team)):
                h, s = self._locks(locks, lo, hi)
                out[f"{name}_locked_hiders_{phase}"] = h
                out[f"{name}_locked_seekers_{phase}"] = s
        out["lock_events_hiders"] = float(lock_events[HIDER])
        out["lock_events_seekers"] = float(lock_events[SEEKER])
        tally, k = self.tally, kernels
        post_prep, team_return = int(tally[k.TALLY_POST_PREP]), float(tally[k.TALLY_TEAM_RETURN])
        out["hider_seen_fraction"] = int(tally[k.TALLY_SEEN]) / post_prep if post_prep else 0.0
        out["hider_team_return"] = team_return
        out["seeker_team_return"] = -team_return
        steps = max(int(tally[k.TALLY_STEPS]), 1)
        held, team = tally[k.TALLY:].astype(np.int64), self._team
        out["hider_holding_fraction"] = float(held[team == HIDER].sum()) / (steps * max(idx.n_hiders, 1))
        out["seeker_holding_fraction"] = float(held[team == SEEKER].sum()) / (steps * max(idx.n_seekers, 1))
        out["agent_out_steps"] = float(tally[k.TALLY_OUT])
        out["episode_length"] = float(tally[k.TALLY_STEPS])
        out.update(n_hiders=float(idx.n_hiders), n_seekers=float(idx.n_seekers),
                   n_boxes=float(idx.n_boxes), n_ramps=float(idx.n_ramps))
        return out
