"""Checkpoints with Orbax: ``LOGDIR/checkpoints/<policy>/<update>/``.

Orbax writes each checkpoint into a temporary folder and renames it when complete,
so a kill during a write never leaves the newest *finalised* checkpoint unreadable.
"""

from __future__ import annotations

import os
from typing import Any

import orbax.checkpoint as ocp


class Checkpointer:
    """Periodic saves and restores of one policy's learner state.

    Args:
      directory: folder for this policy's checkpoints (created if missing).
      max_to_keep: newest checkpoints kept on disk.
    """

    def __init__(self, directory: str, max_to_keep: int = 3):
        self.directory = os.path.abspath(directory)
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Save ``state`` (a pytree of arrays) and ``meta`` (JSON counters) as ``step``."""
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, like: Any, step: int | None = None) -> tuple[Any, dict]:
        """Restore ``(state, meta)``; ``like`` gives the pytree structure, dtypes and shardings.

        Raises:
          FileNotFoundError: there is no checkpoint in the directory.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(like), meta=ocp.args.JsonRestore()))
        return out.state, out.meta

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
