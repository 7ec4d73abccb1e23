"""Videos of evaluated episodes: RGB frames appended one at a time to an MP4 or a GIF.

MP4 goes through ffmpeg (the ``imageio-ffmpeg`` package) and is streamed: frames are
not kept in memory, so every episode of an evaluation fits in one file. Without
``imageio-ffmpeg`` an ``.mp4`` path is written as a ``.gif`` beside it (with a
warning); Pillow, which writes GIFs, holds a GIF's frames until it is closed::

    with VideoWriter("cp.mp4", fps=50) as video:
        for frame in frames:          # [H, W, 3] uint8
            video.append(frame)
    print(video.path)                 # the file actually written
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from typing import Any, Iterable

import imageio.v2 as imageio
import numpy as np

log = logging.getLogger("jaxsrl.tools.video")

FORMATS = (".mp4", ".gif")


def mp4_available() -> bool:
    """Whether imageio can write MP4 here (it needs the ``imageio-ffmpeg`` package)."""
    return importlib.util.find_spec("imageio_ffmpeg") is not None


class VideoWriter:
    """Append ``[H, W, 3]`` uint8 frames to ``path`` (``.mp4`` or ``.gif``) at ``fps``.

    Attributes:
      path: the file being written (an ``.mp4`` without ``imageio-ffmpeg`` becomes a
        ``.gif`` beside it).
      frames: frames appended so far.

    Raises:
      ValueError: ``path`` is neither ``.mp4`` nor ``.gif``, or ``fps`` is not positive.
    """

    def __init__(self, path: str, fps: float):
        root, ext = os.path.splitext(path)
        ext = ext.lower()
        if ext not in FORMATS:
            raise ValueError(f"video {path!r}: the name must end in .mp4 or .gif")
        if not fps > 0:
            raise ValueError(f"video fps={fps} must be > 0")
        if ext == ".mp4" and not mp4_available():
            log.warning("MP4 needs the imageio-ffmpeg package (pip install imageio-ffmpeg); "
                        "writing a GIF instead")
            path, ext = root + ".gif", ".gif"
        self.path, self.fps, self.frames = path, float(fps), 0
        self._mp4 = ext == ".mp4"
        self._writer: Any = None

    def append(self, frame: Any) -> None:
        """Add one ``[H, W, 3]`` uint8 frame (``None``, a frame the env did not draw, is skipped)."""
        if frame is None:
            return
        frame = np.asarray(frame, np.uint8)
        if self._writer is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            if self._mp4:  # macro_block_size=2: even sizes (yuv420p) without resizing to 16s
                self._writer = imageio.get_writer(self.path, fps=self.fps, macro_block_size=2)
            else:
                self._writer = imageio.get_writer(self.path, duration=1000.0 / self.fps, loop=0)
        if self._mp4:
            frame = frame[: frame.shape[0] // 2 * 2, : frame.shape[1] // 2 * 2]
            with warnings.catch_warnings():  # ffmpeg starts as fork+exec: JAX's fork warning is moot
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
                self._writer.append_data(frame)
        else:
            self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> str:
        """Finish the file; returns its path.

        Raises:
          ValueError: no frame was appended (the env drew none).
        """
        writer, self._writer = self._writer, None
        if writer is None:
            raise ValueError("no frames to write (does the env render rgb_array frames?)")
        writer.close()
        return self.path

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_video(path: str, frames: Iterable, fps: float) -> str:
    """Write ``[H, W, 3]`` uint8 frames to ``path`` (``.mp4`` or ``.gif``, see
    :class:`VideoWriter`); returns the path actually written.

    Raises:
      ValueError: no frames, or a path that is neither ``.mp4`` nor ``.gif``.
    """
    writer = VideoWriter(path, fps)
    for frame in frames:
        writer.append(frame)
    return writer.close()
