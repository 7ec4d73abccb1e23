"""The run folder (``--logdir``) belongs to one run: claimed, locked, never mixed.

:func:`claim` is called by :func:`jaxsrl.launch.launcher.train` before anything is written:

* it takes an exclusive lock on ``LOGDIR/.jaxsrl.lock`` (the ``filelock`` library:
  ``flock``, released by the operating system when the process dies, so a killed run
  never leaves a stale lock), so a second live run into the same folder is refused;
* a folder that already holds files is refused unless ``--resume`` (continue that run)
  or ``--overwrite`` (delete it first; only a folder that looks like a jaxsrl run, so a
  mistyped ``--logdir=~`` is never emptied).
"""

from __future__ import annotations

import os
import shutil

import filelock

LOCK_NAME = ".jaxsrl.lock"
#: What marks a folder as a jaxsrl run (any one of them).
RUN_MARKERS = ("config.json", "metrics.jsonl", "checkpoints")


class RunFolderError(ValueError):
    """The run folder cannot be used for this run; the message says why and what to do."""


def claim(logdir: str, resume: bool, overwrite: bool) -> filelock.BaseFileLock:
    """Lock ``logdir`` for this run (creating it) and check it may be used.

    Args:
      logdir: the run folder.
      resume: ``--resume``: the folder's run is continued (its files stay).
      overwrite: ``--overwrite``: an earlier run in the folder is deleted first.

    Returns:
      The held lock; ``release()`` it when the run has ended.

    Raises:
      RunFolderError: another live run holds the folder; it holds files and neither
        ``resume`` nor ``overwrite`` is set; or ``overwrite`` on a folder that is not a
        jaxsrl run.
    """
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, LOCK_NAME)
    lock = filelock.FileLock(path, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise RunFolderError(f"--logdir {logdir} is in use by another live run (it holds {path}): "
                             "stop that run or give another --logdir") from None
    try:
        contents = sorted(n for n in os.listdir(logdir) if n != LOCK_NAME)
        if contents and not resume:
            if not overwrite:
                shown = ", ".join(contents[:3]) + (", ..." if len(contents) > 3 else "")
                raise RunFolderError(f"--logdir {logdir} already holds a run ({shown}): add --resume "
                                     "to continue it, --overwrite to replace it, or give a new --logdir")
            if not any(n in RUN_MARKERS for n in contents):
                raise RunFolderError(f"--overwrite: {logdir} holds no jaxsrl run (none of "
                                     f"{', '.join(RUN_MARKERS)}); not deleting its files")
            for name in contents:
                target = os.path.join(logdir, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)
                else:
                    os.remove(target)
    except BaseException:
        lock.release()
        raise
    return lock


def remove_if_unused(logdir: str) -> None:
    """Delete ``logdir`` if it holds nothing but the lock file (a run that stopped
    before writing anything, e.g. on an unsupported space, leaves no folder behind)."""
    try:
        if os.listdir(logdir) == [LOCK_NAME]:
            os.remove(os.path.join(logdir, LOCK_NAME))
            os.rmdir(logdir)
    except OSError:
        pass  # in use again, or gone: leave it
