"""What an evaluation reports (:class:`EvalResult`), shared by the one evaluation entry
point (:func:`jaxsrl.tools.evaluation.evaluate`) and its JAX-native branch
(:mod:`jaxsrl.tools.device_evaluation`). Imports NumPy only: the branch imports this
module, never :mod:`jaxsrl.tools.evaluation` (no import circle; an import-linter
contract of ``pyproject.toml`` keeps it so)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import numpy as np


def supports_deterministic(act: Callable) -> bool:
    """Whether ``act`` takes ``deterministic=True`` (the most likely action)."""
    try:
        params = inspect.signature(act).parameters
    except (TypeError, ValueError):
        return False
    return "deterministic" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


@dataclasses.dataclass
class EvalResult:
    """Per-episode results of :func:`jaxsrl.tools.evaluation.evaluate`.

    Attributes:
      episodes: one dict per episode: ``return`` (mean over the env's agents; the
        return for single-agent envs), ``length`` (steps), ``truncated`` (bool: it
        ended without reaching a terminal state: the env's time limit, or cut at the
        evaluation's step bound), ``cut`` (bool: cut at that bound, ``--max_steps`` or,
        JAX-native envs, :data:`jaxsrl.workers.device.evaluate.DEFAULT_MAX_STEPS`),
        ``team_returns`` (team -> mean return of its agents; empty for single-agent
        envs), ``stats`` (the env's ``info["episode_stats"]``, if any).
      deterministic: greedy (mode) actions, else sampled.
      video: the file written, if any.
      video_frames: frames written to it (a GIF may merge identical neighbours).
      max_steps: the step bound episodes were cut at (``None``: none).
    """

    episodes: list
    deterministic: bool
    video: str | None = None
    video_frames: int = 0
    max_steps: int | None = None

    def summary(self) -> dict:
        """``episodes``, ``return_mean/std/min/max``, ``length_mean``, ``truncated``
        and ``cut`` (counts of episodes), ``return_mean/<team>``, ``return_std/<team>``
        and ``episode/<stat>`` means (``video``, ``video_frames`` if a video was
        written)."""
        rets = np.array([e["return"] for e in self.episodes], np.float64)
        out: dict[str, Any] = {
            "episodes": len(self.episodes), "deterministic": self.deterministic,
            "return_mean": float(rets.mean()), "return_std": float(rets.std()),
            "return_min": float(rets.min()), "return_max": float(rets.max()),
            "length_mean": float(np.mean([e["length"] for e in self.episodes])),
            "truncated": sum(bool(e.get("truncated")) for e in self.episodes),
            "cut": sum(bool(e.get("cut")) for e in self.episodes),
        }
        teams = sorted({t for e in self.episodes for t in e["team_returns"]})
        for team in teams:
            vals = np.array([e["team_returns"][team] for e in self.episodes
                             if team in e["team_returns"]], np.float64)
            out[f"return_mean/{team}"] = float(vals.mean())
            out[f"return_std/{team}"] = float(vals.std())
        stats = sorted({k for e in self.episodes for k in e["stats"]})
        for key in stats:
            vals = [e["stats"][key] for e in self.episodes if key in e["stats"]]
            out[f"episode/{key}"] = float(np.mean(vals))
        if self.video:
            out["video"] = self.video
            out["video_frames"] = self.video_frames
        return out
