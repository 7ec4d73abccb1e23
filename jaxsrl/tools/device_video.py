"""Frames of JAX-native environments for ``scripts/evaluate.py --video``.

gymnax environments are drawn by gymnax's own ``gymnax.visualize.Visualizer`` (a
matplotlib figure; classic control through Gymnasium's pygame renderer, MinAtar,
bsuite's Catch, the mazes), one frame per state, read back from matplotlib's Agg
canvas. Environments it does not draw, and Brax and JaxMARL environments (whose
renderers need an OpenGL context or return no arrays), cannot record a video: a
``ValueError`` says so in one line."""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np


class GymnaxFrames:
    """``frames(carry, i, t) -> [H, W, 3] uint8``: environment ``i`` of a batched gymnax
    carry (``EnvCarry``, ``[N, ...]`` leaves) drawn by gymnax's Visualizer, titled
    with the step ``t``.

    Attributes:
      fps: the Visualizer's own frame rate (1000 / its interval in ms).

    Raises:
      ValueError: gymnax's Visualizer does not draw this environment.
    """

    def __init__(self, env: Any, env_id: str, first_state: Any):
        os.environ.setdefault("MPLBACKEND", "Agg")  # no display
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control)
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        from gymnax.visualize.visualizer import Visualizer  # noqa: PLC0415 (the gymnax extra)
        self.env_id = env_id
        self._vis = Visualizer(env.env, env.params, [first_state])
        self._vis.init()
        if not hasattr(self._vis, "im"):  # its init draws nothing for this env
            import matplotlib.pyplot as plt  # noqa: PLC0415
            plt.close(self._vis.fig)
            raise ValueError(f"env {env_id!r} cannot record a video: gymnax's Visualizer "
                             "does not draw it; evaluate without --video")
        self.fps = 1000.0 / self._vis.interval

    def __call__(self, carry: Any, i: int, t: int) -> np.ndarray:
        self._vis.state_seq = [jax.tree.map(lambda x: np.asarray(x)[i], carry.state)]
        self._vis.update(0)
        self._vis.ax.set_title(f"{self.env_id}  step {t}", fontsize=15)
        canvas = self._vis.fig.canvas
        canvas.draw()
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()

    def close(self) -> None:
        import matplotlib.pyplot as plt  # noqa: PLC0415
        plt.close(self._vis.fig)


def frame_renderer(env: Any, env_id: str) -> GymnaxFrames:
    """What draws the frames of ``env`` (a :mod:`jaxsrl.envs.jax_native` adapter built
    for ``env_id``); close it when done.

    Raises:
      ValueError: the environment cannot be drawn (one line naming it).
    """
    if not env_id.startswith("gymnax:"):
        raise ValueError(f"env {env_id!r} cannot record a video: jaxsrl draws JAX-native "
                         "environments with gymnax's Visualizer, gymnax ids only; evaluate "
                         "without --video")
    first = env.reset(jax.random.PRNGKey(0), 1).state  # the figure is set up from a state
    return GymnaxFrames(env, env_id, jax.tree.map(lambda x: np.asarray(x)[0], first))
