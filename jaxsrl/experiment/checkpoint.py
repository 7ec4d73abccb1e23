"""Checkpoints with Orbax: ``LOGDIR/checkpoints/<policy>/<update>/``.

Orbax writes each checkpoint into a temporary folder (``<step>.orbax-checkpoint-tmp*``)
and renames it when complete, so a kill during a write leaves only that temporary
folder, which is never restored: the newest *finalised* checkpoint is used. If the
newest finalised checkpoint cannot be read anyway (a damaged disk, a file deleted by
hand), :meth:`Checkpointer.restore` falls back to the next older one, with a one-line
warning; on ``--resume`` the unreadable ones are renamed ``<step>.unreadable`` (kept for
inspection, invisible to Orbax), so the resumed run saves those steps again instead of
colliding with them.

What counts as unreadable: a restore that fails twice in a row (a failure that a second
try gets past, e.g. a brief I/O error, is only logged). Two failures are never damage,
and never rename anything: a checkpoint whose stored arrays (Orbax's metadata: shapes
and dtypes) do not match the state asked for (:class:`StructureMismatch`: the config
changed, not the files), and the device running out of memory
(:func:`is_out_of_memory`); both stop the restore with the error.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import sys
import threading
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxsrl.experiment import events

log = logging.getLogger("jaxsrl.experiment.checkpoint")
#: Orbax 0.12 corrupts checkpoints (``FileNotFoundError`` in ``<step>.orbax-checkpoint-tmp``,
#: unfinalised folders) when two threads start saves at once, even of different managers
#: in different folders (several trainers asked for a checkpoint together); saves started
#: one after the other, from any thread, are fine, their background writes overlapping.
_SAVE_LOCK = threading.Lock()


class StructureMismatch(ValueError):
    """A checkpoint's stored arrays differ from the state it is restored into (leaves
    added, missing, or of another shape or dtype): a changed config, not damage.

    Attributes:
      step: the checkpoint; differences: ``[(path, stored, wanted)]`` with ``stored`` and
        ``wanted`` each ``"shape dtype"`` or ``None`` (absent on that side).
    """

    def __init__(self, directory: str, step: int, differences: list):
        self.step, self.differences = step, differences
        shown = "; ".join(f"{p}: {a or 'absent'} -> {b or 'absent'}" for p, a, b in differences[:3])
        more = f" (+{len(differences) - 3} more)" if len(differences) > 3 else ""
        super().__init__(f"checkpoint {step} in {directory} holds a learner state of another "
                         f"structure: {shown}{more}")


def structure(tree: Any) -> dict[str, str]:
    """``{"a.b.0.c": "(64, 4) float32"}`` for every array leaf of ``tree`` (arrays, or
    ``jax.ShapeDtypeStruct``s from ``jax.eval_shape``, or Orbax ``ArrayMetadata``):
    the part of a pytree a checkpoint restore needs to match. Named tuples are keyed by
    field name and tuples/lists by index, as Orbax stores them; ``None`` leaves are
    skipped."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not hasattr(leaf, "dtype"):
            leaf = np.asarray(leaf)
        out[".".join(_key_name(k) for k in path)] = f"{tuple(leaf.shape)} {np.dtype(leaf.dtype).name}"
    return out


def _key_name(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def stored_structure(directory: str, step: int) -> dict[str, str]:
    """:func:`structure` of the ``state`` item of checkpoint ``step`` in ``directory``, from
    Orbax's metadata file alone (no array is read, nothing is written or created).

    Raises:
      OSError / ValueError: the metadata cannot be read (a missing or damaged checkpoint).
    """
    handler = ocp.StandardCheckpointHandler()
    try:
        meta = handler.metadata(pathlib.Path(directory, str(step), "state"))
    finally:
        handler.close()
    return structure(getattr(meta, "tree", meta))


def structure_differences(stored: dict[str, str], wanted: dict[str, str]) -> list:
    """``[(path, stored, wanted)]`` where two :func:`structure` maps differ (sorted by path)."""
    return [(p, stored.get(p), wanted.get(p)) for p in sorted(set(stored) | set(wanted))
            if stored.get(p) != wanted.get(p)]


class CheckpointWriteError(ValueError):
    """A checkpoint could not be written (a full disk, a quota, a read-only folder): one
    line naming the step, the folder and the newest complete checkpoint, which Orbax's
    atomic rename left intact like every earlier one."""

    one_line = True  # a worker stopped by it logs no traceback (jaxsrl.core.worker)


def _write_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed write of files (not a bug of the saved tree)."""
    if isinstance(exc, OSError):
        return True
    text = str(exc)
    return any(s in text for s in ("No space left", "Failed to write", "Failed writing",
                                    "Disk quota", "Read-only file system", "Error writing"))


def check_meta(meta: Any, step: int) -> dict:
    """``meta`` (a checkpoint's ``meta`` item, as read back) if it is a trainer's counters:
    a map with ``policy_version`` an integer in ``0..2**62`` and, if present, ``env_steps``
    the same and ``wall_time_s`` a finite non-negative number.

    Raises:
      ValueError: anything else, in one line naming the field and its value (the
        restore treats the checkpoint as unreadable and tries the previous one).
    """
    if not isinstance(meta, dict):
        raise ValueError(f"checkpoint {step}: meta is {type(meta).__name__}, not a map")
    for key in ("policy_version", "env_steps"):
        value = meta.get(key, 0) if key == "env_steps" else meta.get(key)
        if type(value) is not int or not 0 <= value <= 2**62:  # noqa: E721  (not bool)
            raise ValueError(f"checkpoint {step}: meta {key}={_shown(value)} is not an integer "
                             "in 0..2**62")
    wall = meta.get("wall_time_s", 0.0)
    if type(wall) not in (int, float) or not math.isfinite(wall) or wall < 0:
        raise ValueError(f"checkpoint {step}: meta wall_time_s={_shown(wall)} is not a finite "
                         "non-negative number")
    return meta


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def finalised_steps(directory: str) -> list[int]:
    """The finalised checkpoint steps in ``directory``, newest first (none if it is
    missing); reads the folder only."""
    if not os.path.isdir(directory):
        return []
    return sorted((int(n) for n in os.listdir(directory) if n.isdigit()), reverse=True)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the host or device running out of memory (XLA's
    ``RESOURCE_EXHAUSTED``): a restore that fails so says nothing about the files."""
    return isinstance(exc, MemoryError) or "RESOURCE_EXHAUSTED" in str(exc)


class Checkpointer:
    """Periodic saves and restores of one policy's learner state.

    Args:
      directory: folder for this policy's checkpoints (created if missing).
      max_to_keep: newest checkpoints kept on disk.
      check: ``check(meta, step) -> meta`` applied to a restored ``meta`` item, raising
        ``ValueError`` for a malformed one (default :func:`check_meta`, a trainer's
        counters; the self-play league's store saves other counters and passes its own).
    """

    #: the meta check unless the constructor is given one (subclasses that build their
    #: own manager without calling ``__init__`` keep the trainer's check)
    _check = staticmethod(check_meta)

    def __init__(self, directory: str, max_to_keep: int = 3, check: Any = None):
        self.directory = os.path.abspath(directory)
        if check is not None:
            self._check = check
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))
        self._writing: int | None = None  # the step of the save in flight (asynchronous)
        _quiet_orbax_write_errors()

    def _failed(self, exc: BaseException) -> BaseException:
        """``exc`` of a save or a wait as :class:`CheckpointWriteError` when it is a failed
        write (else as it is)."""
        if not _write_failed(exc):
            return exc
        complete = finalised_steps(self.directory)
        return CheckpointWriteError(
            f"checkpoint {self._writing} could not be written to {self.directory} (a full disk "
            f"or quota?): {_one_line(exc)[:240]}; the checkpoints saved before it are intact "
            f"(newest complete: {complete[0] if complete else 'none'})")

    def save(self, step: int, state: Any, meta: dict, extra: dict | None = None) -> None:
        """Save ``state`` (a pytree of arrays) and ``meta`` (JSON counters) as ``step``
        (asynchronously; one save starts at a time in this process, see ``_SAVE_LOCK``).

        ``extra`` maps further item names (identifiers other than ``state`` and ``meta``)
        to pytrees of arrays saved beside them, e.g. an off-policy learner's replay
        contents; :meth:`restore` never reads them, :meth:`restore_item` does.

        Raises:
          ValueError: an ``extra`` name that is taken or not an identifier.
          CheckpointWriteError: this save's or the previous one's files could not be
            written (a full disk): one line; earlier checkpoints are intact.
        """
        items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
        for name, tree in (extra or {}).items():
            if name in items or not name.isidentifier():
                raise ValueError(f"extra checkpoint item {name!r} must be an identifier other "
                                 "than 'state' and 'meta'")
            items[name] = ocp.args.StandardSave(tree)
        with _SAVE_LOCK:
            try:
                self.manager.save(step, args=ocp.args.Composite(**items), force=True)
            except Exception as exc:  # noqa: BLE001  (this save's or the previous one's write)
                raise self._failed(exc) from None
            self._writing = step

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
        one, one that failed to restore twice, is skipped with a one-line warning naming
        it). Before restoring, each checkpoint's stored structure (Orbax metadata) is
        compared with ``like``'s; a mismatch stops the restore (nothing is renamed).

        Args:
          like: the pytree to restore into.
          step: this checkpoint, not the newest readable one.
          set_aside_unreadable: rename the unreadable checkpoints newer than the one
            restored to ``<step>.unreadable`` (a run resuming from here saves those steps
            again); otherwise the folder is only read.

        Raises:
          FileNotFoundError: there is no checkpoint in the directory.
          StructureMismatch: the checkpoint tried holds arrays other than ``like``'s.
          MemoryError / XLA ``RESOURCE_EXHAUSTED``: out of memory while restoring.
          RuntimeError: no checkpoint in the directory could be read.
        """
        if step is not None:
            return self._restore_checked(like, step)
        self.manager.reload()
        steps = sorted(self.manager.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        unreadable = []
        for candidate in steps:
            try:
                out = self._restore_checked(like, candidate)
            except StructureMismatch:
                raise
            except Exception as exc:  # noqa: BLE001  (failed twice: damage, try the previous one)
                if is_out_of_memory(exc):
                    raise
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

    def _restore_checked(self, like: Any, step: int) -> tuple[Any, dict]:
        """:meth:`_restore_twice`, after checking that checkpoint ``step`` stores the arrays
        ``like`` has (Orbax itself restores a NumPy leaf of another shape as saved).
        Paths are named as Orbax names them (field, key or index); an unreadable
        metadata file is left to the restore to report; ``like=None`` restores whatever
        was saved.

        Raises:
          StructureMismatch: the stored arrays differ.
        """
        if like is not None:
            try:
                stored = stored_structure(self.directory, step)
            except Exception:  # noqa: BLE001  (damage: the restore itself says what it is)
                stored = None
            differences = [] if stored is None else structure_differences(stored, structure(like))
            if differences:
                raise StructureMismatch(self.directory, step, differences)
        return self._restore_twice(like, step)

    def _restore_twice(self, like: Any, step: int) -> tuple[Any, dict]:
        """:meth:`_restore`, tried again once if it fails (not when out of memory)."""
        try:
            return self._restore(like, step)
        except Exception as exc:  # noqa: BLE001
            quiet_orbax_leftovers()
            if is_out_of_memory(exc):
                raise
            events.emit(log, logging.WARNING, "checkpoint_retry",
                        {"directory": self.directory, "step": step, "error": _one_line(exc)},
                        "checkpoint %d in %s failed to restore (%s); trying it once more",
                        step, self.directory, _one_line(exc))
        return self._restore(like, step)

    def _restore(self, like: Any, step: int) -> tuple[Any, dict]:
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(like), meta=ocp.args.JsonRestore()))
        return out.state, self._check(out.meta, step)

    def close(self) -> None:
        """Wait for pending saves and release the manager.

        Raises:
          CheckpointWriteError: the last save's files could not be written (one line).
        """
        try:
            self.manager.wait_until_finished()
        except Exception as exc:  # noqa: BLE001
            raise self._failed(exc) from None
        finally:
            self.manager.close()


class _OneLineOrbaxErrors(logging.Filter):
    """Orbax's background threads log a failed write with its traceback (hundreds of lines
    per write, several times); the save raises :class:`CheckpointWriteError` in one line
    anyway. This keeps each such record, as one line without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and f"{os.sep}orbax{os.sep}" in (record.pathname or ""):
            if record.exc_info and _write_failed(record.exc_info[1]):
                text = " ".join(record.getMessage().split())
                record.msg, record.args = text[:300] + ("..." if len(text) > 300 else ""), ()
                record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _quiet_orbax_write_errors() -> None:
    """Install :class:`_OneLineOrbaxErrors` on the ``absl`` logger (Orbax's), once."""
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _OneLineOrbaxErrors) for f in absl.filters):
        absl.addFilter(_OneLineOrbaxErrors())


def quiet_orbax_leftovers() -> None:
    """Drop the "Exception ignored in: <coroutine ...>" reports of Orbax's read coroutines.

    A failed restore leaves Orbax's per-array read coroutines (``_read_array_index_and_
    device_put``) unfinished; when they are collected later, Python prints each one's
    traceback (dozens per damaged checkpoint, thousands of lines, long after the one-line
    ``checkpoint_retry`` / ``checkpoint_unreadable`` warning that already names the
    error). From the first failed restore on, the process's ``sys.unraisablehook`` drops
    reports whose object is a coroutine of Orbax's code and passes every other one on.
    Installed once per process.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_jaxsrl_quiet_orbax", False):
        return

    def hook(unraisable: Any) -> None:
        code = getattr(unraisable.object, "cr_code", None)
        if code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
            return
        previous(unraisable)

    hook._jaxsrl_quiet_orbax = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters (TensorStore errors
    run to kilobytes)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
