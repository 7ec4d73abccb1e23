"""Evaluate a trained policy in-process: load a checkpoint, run episodes, record video.

The run is loaded by :func:`jaxsrl.tools.run_loader.load_run` (re-exported here).
Episodes run one at a time in this process, without actors or sockets::

    run = load_run(logdir="runs/cp")                       # newest checkpoint(s)
    result = evaluate(run, episodes=10, deterministic=True, video="cp.mp4")
    print(result.summary()["return_mean"])

Gymnasium envs are built with ``gymnasium.make(env, render_mode="rgb_array")``;
jaxsrl's multi-agent envs (hide-and-seek) with their module's ``make_env``. All agents
of a multi-agent env that share a policy are stacked into one batch for ``act``; with a
policy per team (a ``teams`` dataflow), each team's agents use their own policy.
Used by :mod:`jaxsrl.cli.evaluate` (``scripts/evaluate.py``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import logging
import math
import os
import warnings
from typing import Any, Callable

import gymnasium
import imageio.v2 as imageio
import jax
import numpy as np

from jaxsrl.envs import is_multi_agent, make_env

log = logging.getLogger("jaxsrl.tools.evaluation")


from jaxsrl.tools.run_loader import (LoadedRun, PolicyCheckpoint, load_run, read_config,  # noqa: F401 (re-exported)
                                      restore_params, split_checkpoint_path, team_policies)


# ----------------------------------------------------------------------------------
# Running episodes.


@dataclasses.dataclass
class EvalResult:
    """Per-episode results of :func:`evaluate`.

    Attributes:
      episodes: one dict per episode: ``return`` (mean over the env's agents; the
        return for single-agent envs), ``length``, ``team_returns`` (team -> mean
        return of its agents; empty for single-agent envs), ``stats`` (the env's
        ``info["episode_stats"]``, if any).
      deterministic: greedy (mode) actions, else sampled.
      video: the file written, if any.
    """

    episodes: list
    deterministic: bool
    video: str | None = None

    def summary(self) -> dict:
        """``episodes``, ``return_mean/std/min/max``, ``length_mean``,
        ``return_mean/<team>``, ``return_std/<team>`` and ``episode/<stat>`` means."""
        rets = np.array([e["return"] for e in self.episodes], np.float64)
        out: dict[str, Any] = {
            "episodes": len(self.episodes), "deterministic": self.deterministic,
            "return_mean": float(rets.mean()), "return_std": float(rets.std()),
            "return_min": float(rets.min()), "return_max": float(rets.max()),
            "length_mean": float(np.mean([e["length"] for e in self.episodes])),
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
        return out


def _supports_deterministic(act: Callable) -> bool:
    try:
        params = inspect.signature(act).parameters
    except (TypeError, ValueError):
        return False
    return "deterministic" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _stack(observations: list) -> Any:
    """A list of per-agent observation pytrees -> one batch (leading axis)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *observations)


def make_eval_env(config: dict, render: bool) -> Any:
    """One environment of the run, with ``render_mode="rgb_array"`` when ``render``."""
    env_id, env_kwargs = config["env"], dict(config.get("env_kwargs") or {})
    if render:  # pygame-based renderers (classic control) must not look for a display
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    return make_env(  # Atari: the training preprocessing, full games
        env_id, env_kwargs, render_mode="rgb_array" if render else None)


class _Policy:
    """One policy's jitted ``act`` over a batch, with its recurrent carry."""

    def __init__(self, run: LoadedRun, name: str, deterministic: bool):
        self.act = run.jitted_act(deterministic)
        self.params = run.policies[name].params
        self.initial_carry = run.fns.initial_carry
        self.carry = None

    def reset(self, n: int) -> None:
        self.carry = self.initial_carry(n)

    def __call__(self, obs, rng) -> np.ndarray:
        action, self.carry, _ = self.act(self.params, obs, self.carry, rng)
        return np.asarray(action)


def _to_env_action(action: np.ndarray, space: gymnasium.spaces.Space, clip: bool = True) -> Any:
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(action)
    if isinstance(space, gymnasium.spaces.Box) and not clip:  # as trained (--no_clip_actions)
        return np.asarray(action, space.dtype)
    if isinstance(space, gymnasium.spaces.Box):  # unsquashed Gaussian: clip to bounds
        return np.clip(action, space.low, space.high).astype(space.dtype)
    return action


def evaluate(run: LoadedRun, episodes: int = 10, deterministic: bool = True, seed: int = 0,
             video: str | None = None, video_episode: int = 0, video_every: int = 1,
             video_fps: float | None = None, max_steps: int | None = None) -> EvalResult:
    """Run ``episodes`` episodes with the run's policies; optionally record one.

    Args:
      run: from :func:`load_run`.
      episodes: number of episodes; episode ``i`` resets the env with ``seed + i``.
      deterministic: take the most likely action (``act(..., deterministic=True)``);
        else sample as during training.
      seed: env seeds and the sampling key.
      video: ``.mp4`` (needs ``imageio-ffmpeg``; falls back to ``.gif`` if missing) or
        ``.gif`` path for a video of episode ``video_episode``.
      video_every: keep every n-th frame (smaller GIFs).
      video_fps: frames per second (default: the env's ``render_fps`` / ``video_every``).
      max_steps: cut episodes after this many steps (default: the env's own limit).

    Raises:
      ValueError: ``deterministic`` but the agent's ``act`` has no such keyword.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    if deterministic and not _supports_deterministic(run.fns.act):
        raise ValueError(f"agent {run.agent.name!r}: act() has no 'deterministic' keyword; "
                         "evaluate with sampled actions instead")
    env = make_eval_env(run.config, render=video is not None)
    policies = {name: _Policy(run, name, deterministic) for name in run.policies}
    rng = jax.random.PRNGKey(seed)
    results, frames = [], []
    multi = is_multi_agent(run.config["env"])
    try:
        for i in range(episodes):
            record = video is not None and i == video_episode
            if multi:
                ep, ep_frames, rng = _multi_agent_episode(env, run, policies, seed + i, rng,
                                                          record, video_every, max_steps)
            else:
                ep, ep_frames, rng = _single_agent_episode(
                    env, policies[run.policy_for(None)], seed + i, rng, record, video_every,
                    max_steps, clip=bool(run.config.get("clip_actions", True)))
            results.append(ep)
            if record:
                frames = ep_frames
    finally:
        env.close()
    written = None
    if video is not None and frames:
        fps = video_fps or _render_fps(env) / max(video_every, 1)
        written = write_video(video, frames, fps)
    return EvalResult(results, deterministic, written)


def _render_fps(env: Any) -> float:
    meta = getattr(env, "metadata", None) or {}
    fps = meta.get("render_fps")
    return float(fps) if isinstance(fps, (int, float)) and fps > 0 else 30.0


def _single_agent_episode(env, policy: _Policy, seed: int, rng, record: bool, every: int,
                          max_steps: int | None, clip: bool = True):
    obs, _ = env.reset(seed=seed)
    policy.reset(1)
    frames = [env.render()] if record else []
    total, length = 0.0, 0
    while True:
        rng, key = jax.random.split(rng)
        action = policy(_stack([obs]), key)[0]
        obs, reward, terminated, truncated, _ = env.step(
            _to_env_action(action, env.action_space, clip))
        total += float(reward)
        length += 1
        done = terminated or truncated or (max_steps is not None and length >= max_steps)
        if record and (length % every == 0 or done):
            frames.append(env.render())
        if done:
            break
    return {"return": total, "length": length, "team_returns": {}, "stats": {}}, frames, rng


def _multi_agent_episode(env, run: LoadedRun, policies: dict, seed: int, rng, record: bool,
                         every: int, max_steps: int | None):
    obs, _ = env.reset(seed=seed)
    agents = list(env.agents)
    team_of = getattr(env, "team_of", lambda _: None)
    teams = {a: team_of(a) for a in agents}
    groups: dict[str, list] = {}  # policy -> its agents, in a fixed order
    for a in agents:
        groups.setdefault(run.policy_for(teams[a]), []).append(a)
    for name, members in groups.items():
        policies[name].reset(len(members))
    frames = [env.render()] if record else []
    returns = dict.fromkeys(agents, 0.0)
    stats: dict = {}
    length = 0
    while True:
        actions = {}
        for name, members in groups.items():
            rng, key = jax.random.split(rng)
            batch = policies[name](_stack([obs[a] for a in members]), key)
            for a, act in zip(members, batch):
                actions[a] = _to_env_action(act, env.action_space(a))
        obs, rewards, terms, truncs, infos = env.step(actions)
        length += 1
        for a, r in rewards.items():
            returns[a] += float(r)
        for info in infos.values():
            if isinstance(info, dict) and isinstance(info.get("episode_stats"), dict):
                stats = {k: float(v) for k, v in info["episode_stats"].items()
                         if isinstance(v, (int, float, np.number))}
        done = (not env.agents or all(terms.get(a) or truncs.get(a) for a in agents)
                or (max_steps is not None and length >= max_steps))
        if record and (length % every == 0 or done):
            frames.append(env.render())
        if done:
            break
    team_returns = {}
    for team in sorted({t for t in teams.values() if t is not None}):
        team_returns[team] = float(np.mean([returns[a] for a in agents if teams[a] == team]))
    ep = {"return": float(np.mean(list(returns.values()))), "length": length,
          "team_returns": team_returns, "stats": stats}
    return ep, frames, rng


# ----------------------------------------------------------------------------------
# Video.


def mp4_available() -> bool:
    """Whether imageio can write MP4 here (it needs the ``imageio-ffmpeg`` package)."""
    return importlib.util.find_spec("imageio_ffmpeg") is not None


def write_video(path: str, frames: list, fps: float) -> str:
    """Write ``[H, W, 3]`` uint8 frames to ``path`` (``.mp4`` or ``.gif``).

    An ``.mp4`` without ``imageio-ffmpeg`` installed is written as a ``.gif`` beside
    it instead (with a warning). Returns the path actually written.
    """
    frames = [np.asarray(f, np.uint8) for f in frames if f is not None]
    if not frames:
        raise ValueError("no frames to write (does the env render rgb_array frames?)")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    root, ext = os.path.splitext(path)
    ext = ext.lower()
    if ext == ".mp4" and not mp4_available():
        log.warning("MP4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); "
                    "writing a GIF instead")
        path, ext = root + ".gif", ".gif"
    if ext == ".gif":
        imageio.mimsave(path, frames, duration=1000.0 / fps, loop=0)
        return path
    # Even sizes for yuv420p; macro_block_size=2 avoids resizing to multiples of 16.
    frames = [f[: f.shape[0] // 2 * 2, : f.shape[1] // 2 * 2] for f in frames]
    with warnings.catch_warnings():  # ffmpeg runs as fork+exec: JAX's fork warning is moot
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
        imageio.mimsave(path, frames, fps=fps, macro_block_size=2)
    return path


def format_summary(run: LoadedRun, summary: dict) -> str:
    """A few human-readable lines about an evaluation."""
    lines = []
    for name, ckpt in sorted(run.policies.items()):
        steps = ckpt.meta.get("env_steps")
        lines.append(f"policy {name}: {ckpt.path} (version {ckpt.meta.get('policy_version', ckpt.step)}"
                     + (f", {int(steps):,} env steps" if isinstance(steps, (int, float)) else "") + ")")
    mode = "deterministic" if summary["deterministic"] else "sampled"
    lines.append(f"{run.config.get('agent')} on {run.config.get('env')}: {summary['episodes']} "
                 f"episodes, {mode} actions")
    lines.append(f"return  mean {summary['return_mean']:.2f}  std {summary['return_std']:.2f}  "
                 f"min {summary['return_min']:.2f}  max {summary['return_max']:.2f}  "
                 f"(length mean {summary['length_mean']:.1f})")
    for key in sorted(summary):
        if key.startswith("return_mean/"):
            team = key.split("/", 1)[1]
            lines.append(f"  {team:<8} mean {summary[key]:.2f}  std {summary[f'return_std/{team}']:.2f}")
    stats = [f"{k.split('/', 1)[1]}={summary[k]:.3g}" for k in sorted(summary)
             if k.startswith("episode/") and math.isfinite(summary[k])]
    if stats:
        lines.append("episode statistics (means over episodes):")
        lines.extend("  " + "  ".join(stats[i:i + 4]) for i in range(0, len(stats), 4))
    if summary.get("video"):
        lines.append(f"video: {summary['video']}")
    return "\n".join(lines)
