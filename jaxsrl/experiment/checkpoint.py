"""Checkpoints with Orbax: ``LOGDIR/checkpoints/<policy>/<update>/``.

Orbax writes each checkpoint into a temporary folder (``<step>.orbax-checkpoint-tmp*``)
and renames it when complete, so a kill during a write leaves only that temporary
folder, which is never restored: the newest *finalised* checkpoint is used. If the
newest finalised checkpoint cannot be read anyway (a damaged disk, a file deleted by
hand), :meth:`Checkpointer.restore` falls back to the next older one, with a one-line
warning; on ``--resume`` the unreadable ones are renamed ``<step>.unreadable`` (kept for
inspection, invisible to Orbax), so the resumed run saves those steps again instead of
colliding with them.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import orbax.checkpoint as ocp

from jaxsrl.experiment import events

log = logging.getLogger("jaxsrl.experiment.checkpoint")
#: Orbax 0.12 corrupts checkpoints (``FileNotFoundError`` in ``<step>.orbax-checkpoint-tmp``,
#: unfinalised folders) when two threads start saves at once, even of different managers
#: in different folders (several trainers asked for a checkpoint together); saves started
#: one after the other, from any thread, are fine, their background writes overlapping.
_SAVE_LOCK = threading.Lock()


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

    def save(self, step: int, state: Any, meta: dict, extra: dict | None = None) -> None:
        """Save ``state`` (a pytree of arrays) and ``meta`` (JSON counters) as ``step``
        (asynchronously; one save starts at a time in this process, see ``_SAVE_LOCK``).

        ``extra`` maps further item names (identifiers other than ``state`` and ``meta``)
        to pytrees of arrays saved beside them, e.g. an off-policy learner's replay
        contents; :meth:`restore` never reads them, :meth:`restore_item` does.

        Raises:
          ValueError: an ``extra`` name that is taken or not an identifier.
        """
        items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
        for name, tree in (extra or {}).items():
            if name in items or not name.isidentifier():
                raise ValueError(f"extra checkpoint item {name!r} must be an identifier other "
                                 "than 'state' and 'meta'")
            items[name] = ocp.args.StandardSave(tree)
        with _SAVE_LOCK:
            self.manager.save(step, args=ocp.args.Composite(**items), force=True)

    def has_item(self, step: int, name: str) -> bool:
        """Whether checkpoint ``step`` holds the extra item ``name`` (see :meth:`save`)."""
        return os.path.isdir(os.path.join(self.directory, str(step), name))

    def restore_item(self, step: int, name: str) -> Any:
        """The extra item ``name`` of checkpoint ``step`` as saved (numpy arrays).

        Raises:
          FileNotFoundError: checkpoint ``step`` has no item ``name``.
        """
        if not self.has_item(step, name):
            raise FileNotFoundError(f"checkpoint {step} in {self.directory} has no {name!r} item")
        out = self.manager.restore(step, args=ocp.args.Composite(
            **{name: ocp.args.StandardRestore()}))
        return out[name]

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, like: Any, step: int | None = None, *,
                set_aside_unreadable: bool = False) -> tuple[Any, dict]:
        """Restore ``(state, meta)``; ``like`` gives the pytree structure, dtypes and shardings.

        Without ``step``, the newest readable checkpoint is restored (an unreadable newer
        one is skipped with a one-line warning naming it).

        Args:
          like: the pytree to restore into.
          step: this checkpoint, not the newest readable one.
          set_aside_unreadable: rename the unreadable checkpoints newer than the one
            restored to ``<step>.unreadable`` (a run resuming from here saves those steps
            again); otherwise the folder is only read.

        Raises:
          FileNotFoundError: there is no checkpoint in the directory.
          RuntimeError: no checkpoint in the directory could be read.
        """
        if step is not None:
            return self._restore(like, step)
        self.manager.reload()
        steps = sorted(self.manager.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        unreadable = []
        for candidate in steps:
            try:
                out = self._restore(like, candidate)
            except Exception as exc:  # noqa: BLE001  (any damage: try the previous one)
                unreadable.append((candidate, _one_line(exc)))
                events.emit(log, logging.WARNING, "checkpoint_unreadable",
                            {"directory": self.directory, "step": candidate, "error": _one_line(exc)},
                            "checkpoint %d in %s is unreadable (%s); trying an older one",
                            candidate, self.directory, _one_line(exc))
                continue
            if set_aside_unreadable and unreadable:
                for bad, _ in unreadable:
                    target = self._set_aside(bad)
                    events.emit(log, logging.WARNING, "checkpoint_set_aside",
                                {"directory": self.directory, "step": bad, "restored": candidate,
                                 "moved_to": target},
                                "resuming from checkpoint %d: moved the unreadable checkpoint %d "
                                "to %s", candidate, bad, target)
                self.manager.reload()
            return out
        raise RuntimeError(f"no readable checkpoint in {self.directory}: "
                           + "; ".join(f"{s_}: {e}" for s_, e in unreadable))

    def _set_aside(self, step: int) -> str:
        """Rename checkpoint ``step`` to ``<step>.unreadable`` (``-2``, ... if taken)."""
        target, n = os.path.join(self.directory, f"{step}.unreadable"), 1
        while os.path.exists(target):
            n += 1
            target = os.path.join(self.directory, f"{step}.unreadable-{n}")
        os.rename(os.path.join(self.directory, str(step)), target)
        return target

    def _restore(self, like: Any, step: int) -> tuple[Any, dict]:
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(like), meta=ocp.args.JsonRestore()))
        meta = out.meta
        if not isinstance(meta, dict):
            raise ValueError(f"checkpoint {step}: meta is {type(meta).__name__}, not a dict")
        return out.state, meta

    def close(self) -> None:
        """Wait for pending saves and release the manager."""
        self.manager.wait_until_finished()
        self.manager.close()


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters (TensorStore errors
    run to kilobytes)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
