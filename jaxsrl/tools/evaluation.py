"""Evaluate a trained policy in-process: load a checkpoint, run episodes, record video.

The run is loaded by :func:`jaxsrl.tools.run_loader.load_run` (re-exported here).
Episodes run one at a time in this process, without actors or sockets::

    run = load_run(logdir="runs/cp")                       # newest checkpoint(s)
    result = evaluate(run, episodes=10, deterministic=True, video="cp.mp4")  # every episode
    print(result.summary()["return_mean"])

Gymnasium envs are built with ``gymnasium.make(env)`` as in training, and with
``render_mode="rgb_array"`` only when a video is asked for (an env that cannot draw
frames then fails with a ``ValueError`` naming it); jaxsrl's multi-agent envs
(hide-and-seek) with their module's ``make_env``; a JAX-native env (a device-actor run,
``gymnax:CartPole-v1``) by :mod:`jaxsrl.tools.device_evaluation`, its episodes in
compiled calls of a bounded number of steps (that module imports
:mod:`jaxsrl.tools.eval_result`, never this one). All agents
of a multi-agent env that share a policy are stacked into one batch for ``act``; with a
policy per team (a ``teams`` dataflow), each team's agents use their own policy.
Used by :mod:`jaxsrl.cli.evaluate` (``scripts/evaluate.py``).
"""

from __future__ import annotations

import functools
import logging
import math
import os
from typing import Any, Callable

import gymnasium
import jax
import numpy as np

from jaxsrl.envs import is_multi_agent, make_env
from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.tools.eval_result import EvalResult, supports_deterministic  # noqa: F401 (re-exported)
from jaxsrl.tools.video import VideoWriter, mp4_available, write_video  # noqa: F401 (re-exported)

log = logging.getLogger("jaxsrl.tools.evaluation")


from jaxsrl.tools.run_loader import (LoadedRun, PolicyCheckpoint, load_run, read_config,  # noqa: F401 (re-exported)
                                      restore_params, split_checkpoint_path, team_policies)


# ----------------------------------------------------------------------------------
# Running episodes.


def _stack(observations: list) -> Any:
    """A list of per-agent observation pytrees -> one batch (leading axis)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *observations)


def make_eval_env(config: dict, render: bool) -> Any:
    """One environment of the run; ``render_mode="rgb_array"`` only when ``render``
    (without it the env is built exactly as in training).

    Raises:
      ValueError: ``render`` but the env cannot draw ``rgb_array`` frames (its
        constructor takes no ``render_mode``, or its ``metadata["render_modes"]`` lacks
        ``"rgb_array"``), naming the env.
    """
    env_id, env_kwargs = config["env"], dict(config.get("env_kwargs") or {})
    if not render:
        return make_env(env_id, env_kwargs)  # Atari: the training preprocessing, full games
    # pygame-based renderers (classic control) must not look for a display
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        env = make_env(env_id, env_kwargs, render_mode="rgb_array")
    except TypeError as exc:
        if "render_mode" not in str(exc):
            raise
        raise ValueError(f"env {env_id!r} cannot record a video: its constructor takes no "
                         "render_mode keyword; evaluate without --video") from None
    modes = (getattr(env, "metadata", None) or {}).get("render_modes")
    if modes is not None and "rgb_array" not in modes:
        env.close()
        raise ValueError(f"env {env_id!r} cannot record a video: its metadata['render_modes'] "
                         f"is {list(modes)}, without 'rgb_array'; evaluate without --video")
    return env


def _frame(env: Any, env_id: str) -> np.ndarray:
    """``env.render()`` as an ``[H, W, 3]`` uint8 frame.

    Raises:
      ValueError: the env cannot draw it (gymnasium's checks raise a bare
        ``AssertionError``), naming the env.
    """
    try:
        frame = env.render()
    except (AssertionError, NotImplementedError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"env {env_id!r} cannot render rgb_array frames ({detail}); "
                         "evaluate without --video") from None
    array = None if frame is None else np.asarray(frame)
    if array is None or array.ndim != 3 or array.shape[-1] != 3:
        got = "None" if array is None else f"an array of shape {array.shape}"
        raise ValueError(f"env {env_id!r} cannot render rgb_array frames: render() returned "
                         f"{got}, not [H, W, 3]; evaluate without --video")
    return array


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
             video: str | None = None, video_episode: int | None = None, video_every: int = 1,
             video_fps: float | None = None, max_steps: int | None = None) -> EvalResult:
    """Run ``episodes`` episodes with the run's policies; optionally record them.

    Args:
      run: from :func:`load_run`.
      episodes: number of episodes; episode ``i`` resets the env with ``seed + i``.
      deterministic: take the most likely action (``act(..., deterministic=True)``);
        else sample as during training.
      seed: env seeds and the sampling key (a JAX-native env: the evaluation's key
        ``PRNGKey(seed)``, split over the episodes).
      video: ``.mp4`` (needs ``imageio-ffmpeg``; falls back to ``.gif`` if missing) or
        ``.gif`` path for a video of every episode, one after the other (streamed to
        MP4: frames are not kept in memory).
      video_episode: record only this episode (default ``None``: all of them).
      video_every: keep every n-th frame (smaller GIFs).
      video_fps: frames per second (default: the env's ``render_fps`` / ``video_every``).
      max_steps: cut episodes after this many steps (default: the env's own limit; a
        JAX-native env without one is cut at
        :data:`jaxsrl.workers.device.evaluate.DEFAULT_MAX_STEPS`). A cut episode counts
        as ``truncated`` and ``cut`` in the result.

    A JAX-native env (a device-actor run) is handed to
    :func:`jaxsrl.tools.device_evaluation.evaluate`: its episodes run in compiled calls
    of at most :data:`jaxsrl.workers.device.evaluate.CHUNK_STEPS` steps, so Ctrl-C stops
    it between two calls; the whole evaluation is bounded by ``max_steps``, else the
    env's time limit, else ``DEFAULT_MAX_STEPS``.

    Raises:
      ValueError: ``deterministic`` but the agent's ``act`` has no such keyword; a
        ``video`` of an env that cannot render ``rgb_array`` frames (naming it); a bad
        ``video`` name or ``video_episode``; ``episodes`` or ``max_steps`` < 1.
      KeyboardInterrupt: Ctrl-C (between two steps, or two compiled calls).
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1")
    if video_episode is not None and not 0 <= video_episode < episodes:
        raise ValueError(f"video_episode={video_episode} must be in [0, episodes={episodes})")
    if deterministic and not supports_deterministic(run.fns.act):
        raise ValueError(f"agent {run.agent.name!r}: act() has no 'deterministic' keyword; "
                         "evaluate with sampled actions instead")
    env_id = run.config["env"]
    if is_jax_native(env_id):  # a device-actor run: its JAX-native env, one compiled loop
        from jaxsrl.tools import device_evaluation  # noqa: PLC0415 (imports the env's library)
        return device_evaluation.evaluate(run, episodes, deterministic, seed, video, video_episode,
                                          video_every, video_fps, max_steps)
    env = make_eval_env(run.config, render=video is not None)
    policies = {name: _Policy(run, name, deterministic) for name in run.policies}
    rng = jax.random.PRNGKey(seed)
    results = []
    multi = is_multi_agent(env_id)
    writer = None
    try:
        if video is not None:
            writer = VideoWriter(video, video_fps or _render_fps(env) / max(video_every, 1))
        for i in range(episodes):
            on_frame = None
            if writer is not None and (video_episode is None or i == video_episode):
                on_frame = functools.partial(_record_frame, writer, env, env_id)
            if multi:
                ep, rng = _multi_agent_episode(env, run, policies, seed + i, rng,
                                               on_frame, video_every, max_steps)
            else:
                ep, rng = _single_agent_episode(
                    env, policies[run.policy_for(None)], seed + i, rng, on_frame, video_every,
                    max_steps, clip=bool(run.config.get("clip_actions", True)))
            results.append(ep)
        written = writer.close() if writer is not None else None
    finally:
        env.close()
        if writer is not None:
            writer.__exit__(None, None, None)  # a failed run leaves no open ffmpeg
    return EvalResult(results, deterministic, written, writer.frames if writer else 0, max_steps)


def _record_frame(writer: VideoWriter, env: Any, env_id: str) -> None:
    writer.append(_frame(env, env_id))


def _render_fps(env: Any) -> float:
    meta = getattr(env, "metadata", None) or {}
    fps = meta.get("render_fps")
    return float(fps) if isinstance(fps, (int, float)) and fps > 0 else 30.0


def _single_agent_episode(env, policy: _Policy, seed: int, rng, on_frame: Callable | None,
                          every: int, max_steps: int | None, clip: bool = True):
    """One episode: ``({"return", "length", "team_returns", "stats"}, rng)``;
    ``on_frame()`` (if given) after the reset and every ``every``-th step and the last."""
    obs, _ = env.reset(seed=seed)
    policy.reset(1)
    if on_frame:
        on_frame()
    total, length = 0.0, 0
    while True:
        rng, key = jax.random.split(rng)
        action = policy(_stack([obs]), key)[0]
        obs, reward, terminated, truncated, _ = env.step(
            _to_env_action(action, env.action_space, clip))
        total += float(reward)
        length += 1
        cut = not (terminated or truncated) and max_steps is not None and length >= max_steps
        done = terminated or truncated or cut
        if on_frame and (length % every == 0 or done):
            on_frame()
        if done:
            break
    return {"return": total, "length": length, "truncated": not terminated, "cut": cut,
            "team_returns": {}, "stats": {}}, rng


def _multi_agent_episode(env, run: LoadedRun, policies: dict, seed: int, rng,
                         on_frame: Callable | None, every: int, max_steps: int | None):
    """As :func:`_single_agent_episode`, every agent acting through its team's policy."""
    obs, _ = env.reset(seed=seed)
    agents = list(env.agents)
    team_of = getattr(env, "team_of", lambda _: None)
    teams = {a: team_of(a) for a in agents}
    groups: dict[str, list] = {}  # policy -> its agents, in a fixed order
    for a in agents:
        groups.setdefault(run.policy_for(teams[a]), []).append(a)
    for name, members in groups.items():
        policies[name].reset(len(members))
    if on_frame:
        on_frame()
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
        ended = not env.agents or all(terms.get(a) or truncs.get(a) for a in agents)
        cut = not ended and max_steps is not None and length >= max_steps
        done = ended or cut
        if on_frame and (length % every == 0 or done):
            on_frame()
        if done:
            break
    team_returns = {}
    for team in sorted({t for t in teams.values() if t is not None}):
        team_returns[team] = float(np.mean([returns[a] for a in agents if teams[a] == team]))
    ep = {"return": float(np.mean(list(returns.values()))), "length": length,
          "truncated": not all(terms.get(a) for a in agents), "cut": cut,
          "team_returns": team_returns, "stats": stats}
    return ep, rng


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
    teams = [k.split("/", 1)[1] for k in sorted(summary) if k.startswith("return_mean/")]
    if teams:  # a team game: the mean over every agent (about 0 when zero-sum) says nothing
        lines.append(f"return per team (mean over its agents; episode length mean "
                     f"{summary['length_mean']:.1f}):")
        lines.extend(f"  {team:<8} mean {summary[f'return_mean/{team}']:.2f}  "
                     f"std {summary[f'return_std/{team}']:.2f}" for team in teams)
    else:
        lines.append(f"return  mean {summary['return_mean']:.2f}  std {summary['return_std']:.2f}  "
                     f"min {summary['return_min']:.2f}  max {summary['return_max']:.2f}  "
                     f"(length mean {summary['length_mean']:.1f})")
    if summary.get("truncated"):
        cut = summary.get("cut", 0)
        lines.append(f"truncated: {summary['truncated']} of {summary['episodes']} episodes "
                     f"ended without a terminal state ({cut} cut at the evaluation's step bound)")
    stats = [f"{k.split('/', 1)[1]}={summary[k]:.3g}" for k in sorted(summary)
             if k.startswith("episode/") and math.isfinite(summary[k])]
    if stats:
        lines.append("episode statistics (means over episodes):")
        lines.extend("  " + "  ".join(stats[i:i + 4]) for i in range(0, len(stats), 4))
    if summary.get("video"):
        frames = summary.get("video_frames")
        lines.append(f"video: {summary['video']}" + (f" ({frames} frames)" if frames else ""))
    return "\n".join(lines)
