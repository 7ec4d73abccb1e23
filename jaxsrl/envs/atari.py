"""Atari 2600 games (``ALE/<Game>-v5`` from ``ale-py``) with the standard preprocessing.

One environment is built as this stack of Gymnasium wrappers (innermost first)::

  ALE/<Game>-v5     frameskip=1, repeat_action_probability=0.25 (sticky actions, the v5
                    default; Machado et al. 2018), minimal action set, at most 108,000
                    frames (30 minutes of play) per game
  AtariPreprocessing  no-op reset (1..30 NOOPs), frame skip 4 with a max over the last
                    two frames, 84x84 grayscale (Mnih et al. 2015)
  RecordEpisodeStatistics  the RAW return and length (agent steps) of each full game,
                    reported as ``info["raw_episode"] = {"r", "l", "t"}`` when the game ends
  EpisodicLife      (training) a lost life ends the training episode (``terminated``);
                    the game goes on: the next ``reset`` steps a NOOP instead of resetting
  TransformReward   (training) reward clipping, ``sign(r)``
  FrameStackObservation + channels last  ``[84, 84, 4]`` uint8, newest frame last

Observations stay uint8 (the network scales by 1/255), so frames travel over the wire as
bytes. Returns reported to the learner's metrics come from ``info["raw_episode"]``: the
unclipped score of the whole game, never of one life (see :class:`GymVectorEnv`'s
``episodes_from_info``). No FIRE-on-reset wrapper: games that need FIRE to start
(Breakout) learn to press it (Machado et al. 2018 recommend against FIRE-reset).

``env_kwargs`` (the ``[env_kwargs]`` TOML table) may set any :data:`PREPROCESSING`
option; the rest go to ``gymnasium.make`` (e.g. ``repeat_action_probability = 0.0``,
``full_action_space = true``). ``frameskip`` must stay 1 (frames are skipped here).
This module imports no JAX.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np

#: preprocessing options and their defaults; ``training_*`` are on only in actors.
PREPROCESSING = {
    "noop_max": 30,  # NOOPs at reset: uniform in [1, noop_max] (Mnih et al. 2015)
    "frame_skip": 4,  # agent steps every 4th frame; max over the last two frames
    "screen_size": 84,  # square grayscale frame side, pixels
    "frame_stack": 4,  # frames per observation (channels)
    "episodic_life": True,  # training only: a lost life ends the training episode
    "clip_rewards": True,  # training only: reward -> sign(reward)
}


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an Arcade Learning Environment id (``ALE/<Game>-v5``)."""
    return env_id.startswith("ALE/")


def register() -> None:
    """Register the ``ALE/*`` ids with Gymnasium (importing ``ale_py`` does it).

    Raises:
      ValueError: ``ale-py`` is not installed.
    """
    try:
        # Optional dependency: ale-py, imported only for ALE/ ids (the import registers
        # every game: 0.2 s and the emulator library, which other actors do without).
        import ale_py  # noqa: PLC0415
    except ImportError:
        raise ValueError("Atari environments need ale-py: pip install 'ale-py>=0.12'") from None
    gymnasium.register_envs(ale_py)


def split_kwargs(env_kwargs: dict | None) -> tuple[dict, dict]:
    """``env_kwargs`` -> ``(preprocessing options with defaults, gymnasium.make kwargs)``.

    Raises:
      ValueError: ``frameskip`` other than 1, or a non-positive preprocessing option.
    """
    kwargs = dict(env_kwargs or {})
    options = {k: kwargs.pop(k, default) for k, default in PREPROCESSING.items()}
    if kwargs.setdefault("frameskip", 1) != 1:
        raise ValueError(f"frameskip={kwargs['frameskip']!r}: leave the ALE's frameskip at 1; "
                         f"set frame_skip (our max-pooling frame skip) instead")
    for name in ("frame_skip", "screen_size", "frame_stack"):
        if not (isinstance(options[name], int) and options[name] >= 1):
            raise ValueError(f"env_kwargs.{name}={options[name]!r} must be a positive integer")
    if not (isinstance(options["noop_max"], int) and options["noop_max"] >= 0):
        raise ValueError(f"env_kwargs.noop_max={options['noop_max']!r} must be an integer >= 0")
    return options, kwargs


class EpisodicLife(gymnasium.Wrapper):
    """A lost life ends the training episode, but not the game (Mnih et al. 2015).

    ``step`` returns ``terminated=True`` when the ALE's life counter drops; the following
    ``reset`` then takes one NOOP step instead of resetting the game, so the agent
    learns from every life while the game (and the raw score below this wrapper) goes
    on. A real reset happens only once the game is over or truncated.
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # NOOP
            if terminated or truncated:  # the game ended on that NOOP (time limit)
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


def make_env(env_id: str, env_kwargs: dict | None = None, *, training: bool = True,
             render_mode: str | None = None) -> gymnasium.Env:
    """One preprocessed Atari environment (see the module docstring).

    Args:
      env_id: ``ALE/<Game>-v5``.
      env_kwargs: preprocessing options (:data:`PREPROCESSING`) and ``gymnasium.make``
        keyword arguments.
      training: apply episodic life and reward clipping (when enabled in the options);
        ``False`` for evaluation (full games, raw rewards).
      render_mode: passed to ``gymnasium.make`` (``"rgb_array"`` for videos).

    Returns:
      An env with observation space ``Box(0, 255, (S, S, K), uint8)`` (``S`` screen size,
      ``K`` stacked frames, newest last) and the game's ``Discrete`` action space.
    """
    register()
    options, make_kwargs = split_kwargs(env_kwargs)
    env = gymnasium.make(env_id, render_mode=render_mode, **make_kwargs)
    env = gymnasium.wrappers.AtariPreprocessing(
        env, noop_max=options["noop_max"], frame_skip=options["frame_skip"],
        screen_size=options["screen_size"], terminal_on_life_loss=False, grayscale_obs=True)
    env = gymnasium.wrappers.RecordEpisodeStatistics(env, stats_key="raw_episode")
    if training and options["episodic_life"]:
        env = EpisodicLife(env)
    if training and options["clip_rewards"]:
        env = gymnasium.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    env = gymnasium.wrappers.FrameStackObservation(env, options["frame_stack"])  # [K, S, S]
    size, stack = options["screen_size"], options["frame_stack"]
    return gymnasium.wrappers.TransformObservation(
        env, lambda obs: np.moveaxis(obs, 0, -1),
        gymnasium.spaces.Box(0, 255, (size, size, stack), np.uint8))


def env_fn(env_id: str, env_kwargs: dict | None = None, training: bool = True
           ) -> Callable[[], gymnasium.Env]:
    """A zero-argument constructor of :func:`make_env` (for a vector env)."""
    return lambda: make_env(env_id, env_kwargs, training=training)


def spaces(env_id: str, env_kwargs: dict | None = None) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of one preprocessed environment."""
    env = make_env(env_id, env_kwargs, training=False)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
