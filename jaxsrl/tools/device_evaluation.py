"""Evaluate a trained run whose environment is JAX-native (``gymnax:CartPole-v1``,
``brax:halfcheetah``, ``jaxmarl:MPE_simple_spread_v3``; ``docs/device_actors.md``):
its episodes run on the JAX-native environment the device actors trained on, under
compiled calls of at most :data:`~jaxsrl.workers.device.evaluate.CHUNK_STEPS` steps
(:mod:`jaxsrl.workers.device.evaluate`), not as Gymnasium envs. Bounded: an episode is cut
at ``max_steps``, else the env's own time limit, else
:data:`~jaxsrl.workers.device.evaluate.DEFAULT_MAX_STEPS` steps, and counted
``truncated`` and ``cut``; Ctrl-C stops it between two calls.

:func:`jaxsrl.tools.evaluation.evaluate` hands such runs here, so ``scripts/evaluate.py``
and the seeds runner print and write what they do for a CPU run. Keys: the evaluation's
key is ``PRNGKey(seed)``, split over the episodes' resets (the CPU path resets episode
``i`` with seed ``seed + i``). A video (``--video``) steps the same episodes on the host
and draws them with :mod:`jaxsrl.tools.device_video`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from jaxsrl.envs.jax_native import registry
from jaxsrl.tools.device_video import frame_renderer
from jaxsrl.tools.eval_result import EvalResult
from jaxsrl.tools.run_loader import LoadedRun
from jaxsrl.tools.video import VideoWriter
from jaxsrl.workers.device.evaluate import Outcome, make_evaluation, trace


def make_env(config: dict) -> Any:
    """The run's batched JAX-native environment, built as the device actors built it
    (``env``, ``env_kwargs``, ``clip_actions`` of ``config.json``).

    Raises:
      ValueError: its library is missing (naming the pip extra), or an unknown env.
    """
    return registry.make(config["env"], config.get("env_kwargs"),
                         bool(config.get("clip_actions", True)))


def result_of(returns: Any, lengths: Any, deterministic: bool, video: str | None = None,
              frames: int = 0, truncated: Any = None, cut: Any = None,
              max_steps: int | None = None) -> EvalResult:
    """An :class:`EvalResult` of per-episode ``returns`` (``[E]`` float, an environment's
    agents' mean) and ``lengths`` (``[E]`` int steps), as the CPU evaluation reports them;
    ``truncated`` and ``cut`` (``[E]`` bool, :class:`~jaxsrl.workers.device.evaluate.Outcome`;
    ``None``: all False), ``max_steps`` the bound the episodes were cut at."""
    n = len(np.asarray(returns))
    truncated = np.zeros(n, bool) if truncated is None else np.asarray(truncated)
    cut = np.zeros(n, bool) if cut is None else np.asarray(cut)
    episodes = [{"return": float(r), "length": int(length), "truncated": bool(t), "cut": bool(c),
                 "team_returns": {}, "stats": {}}
                for r, length, t, c in zip(np.asarray(returns), np.asarray(lengths), truncated, cut)]
    return EvalResult(episodes, deterministic, video, frames, max_steps)


def outcome_result(outcome: Outcome, deterministic: bool, max_steps: int,
                   video: str | None = None, frames: int = 0) -> EvalResult:
    """:func:`result_of` of an :class:`~jaxsrl.workers.device.evaluate.Outcome`."""
    return result_of(outcome.returns, outcome.lengths, deterministic, video, frames,
                     outcome.truncated, outcome.cut, max_steps)


def evaluate(run: LoadedRun, episodes: int, deterministic: bool, seed: int,
             video: str | None, video_episode: int | None, video_every: int,
             video_fps: float | None, max_steps: int | None) -> EvalResult:
    """:func:`jaxsrl.tools.evaluation.evaluate` (same arguments, checked there) for a
    JAX-native run: one policy acts for every row (device actors run one). Bounded
    (:func:`~jaxsrl.workers.device.evaluate.make_evaluation`'s ``max_steps``) and run in
    compiled chunks; a video steps the same episodes one compiled step per call.

    Raises:
      ValueError: the env's library is missing; a ``video`` of an env that cannot be
        drawn (one line naming it, :func:`~jaxsrl.tools.device_video.frame_renderer`).
      KeyboardInterrupt: Ctrl-C between two compiled calls.
    """
    env = make_env(run.config)
    render = frame_renderer(env, run.config["env"]) if video is not None else None
    act = functools.partial(run.fns.act, deterministic=True) if deterministic else run.fns.act
    evaluation = make_evaluation(env, act, episodes, run.fns.initial_carry, max_steps)
    params = run.policies[run.policy_for(None)].params
    key = jax.random.PRNGKey(seed)
    if render is None:
        return outcome_result(evaluation.run_chunks(params, key), deterministic,
                              evaluation.max_steps)
    try:
        outcome, states = trace(evaluation, params, key)
        lengths = outcome.lengths
        with VideoWriter(video, video_fps or render.fps / max(video_every, 1)) as writer:
            for i in range(episodes):
                if video_episode is not None and i != video_episode:
                    continue
                n = int(lengths[i])
                for t in range(n):  # the states the episode acted in (then an auto-reset)
                    if t % video_every == 0 or t == n - 1:
                        writer.append(render(states[t], i, t))
            written = writer.close()
    finally:
        render.close()
    return outcome_result(outcome, deterministic, evaluation.max_steps, written, writer.frames)
