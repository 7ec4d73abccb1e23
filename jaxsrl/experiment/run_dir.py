"""The run folder (``--logdir``): its layout, known here alone, and its ownership.

Layout (:class:`RunDir`)::

    LOGDIR/config.json                    the resolved config, written at start
    LOGDIR/metrics.jsonl                  one JSON record per logging interval
    LOGDIR/run_events.jsonl               faults, restarts, resumes (jaxsrl.experiment.events)
    LOGDIR/checkpoints/<policy>/<step>/   Orbax checkpoints of each policy
    LOGDIR/errors/<worker>.txt            a failed worker process's error
    LOGDIR/eval/v<version>.json           periodic evaluations (``--eval_every``)
    LOGDIR/population/                    a ``--population`` run's events.jsonl (every
                                          exploit/explore), lineage.json, state.json
    LOGDIR/selfplay/                      an ``[opponents]`` run's pools: snapshots/<n>/
                                          (Orbax), league.json, league.md
    LOGDIR/events.out.tfevents.*          TensorBoard; LOGDIR/wandb_run_id: the W&B run
    LOGDIR/.jaxsrl.lock                   held while a run uses the folder

A run folder belongs to one run: claimed, locked, never mixed. :func:`claim` is called
by :func:`jaxsrl.launch.launcher.train` before anything is written:

* it takes an exclusive lock on ``LOGDIR/.jaxsrl.lock`` (the ``filelock`` library:
  ``flock``, released by the operating system when the process dies, so a killed run
  never leaves a stale lock), so a second live run into the same folder is refused;
* a folder that already holds files is refused unless ``--resume`` (continue that run)
  or ``--overwrite`` (delete it first; only a folder that looks like a jaxsrl run, so a
  mistyped ``--logdir=~`` is never emptied).
"""

from __future__ import annotations

import json
import os
import shutil

import filelock

from jaxsrl.experiment.events import EVENTS_NAME, read_events

LOCK_NAME = ".jaxsrl.lock"
CONFIG_NAME = "config.json"
METRICS_NAME = "metrics.jsonl"
CHECKPOINTS_NAME = "checkpoints"
#: What marks a folder as a jaxsrl run (any one of them).
RUN_MARKERS = (CONFIG_NAME, METRICS_NAME, CHECKPOINTS_NAME)


class RunDir:
    """Paths of one run folder, and reading and writing its config and metrics.

    Args:
      path: the run folder (``--logdir``); need not exist yet.
    """

    def __init__(self, path: str):
        self.path = path

    def __repr__(self) -> str:
        return f"RunDir({self.path!r})"

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, CONFIG_NAME)

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.path, METRICS_NAME)

    @property
    def events_path(self) -> str:
        """The run's structured events (:mod:`jaxsrl.experiment.events`)."""
        return os.path.join(self.path, EVENTS_NAME)

    def read_events(self, kind: str | None = None) -> list[dict]:
        """The run's events of one ``kind`` (or all), oldest first."""
        return read_events(self.events_path, kind)

    @property
    def checkpoints_path(self) -> str:
        return os.path.join(self.path, CHECKPOINTS_NAME)

    @property
    def eval_path(self) -> str:
        """Folder of the periodic evaluations' summaries."""
        return os.path.join(self.path, "eval")

    def eval_file(self, version: int) -> str:
        """Summary of the periodic evaluation of policy version ``version``."""
        return os.path.join(self.eval_path, f"v{int(version)}.json")

    @property
    def population_path(self) -> str:
        """Folder of a population run's manager files (``jaxsrl/workers/population``)."""
        return os.path.join(self.path, "population")

    def population_file(self, name: str) -> str:
        """``population/<name>``: ``events.jsonl``, ``lineage.json`` or ``state.json``."""
        return os.path.join(self.population_path, name)

    @property
    def selfplay_path(self) -> str:
        """Folder of a self-play run's pools and league (``jaxsrl/workers/population/league_store.py``)."""
        return os.path.join(self.path, "selfplay")

    @property
    def wandb_id_path(self) -> str:
        """Where the W&B run id is kept (``--resume`` continues that W&B run)."""
        return os.path.join(self.path, "wandb_run_id")

    def checkpoint_dir(self, policy: str) -> str:
        """Folder of ``policy``'s checkpoints (one sub-folder per step)."""
        return os.path.join(self.checkpoints_path, policy)

    def error_file(self, worker: str) -> str:
        """Where worker process ``worker`` (``actor3``, ``policy[1]``) leaves its error."""
        return os.path.join(self.path, "errors", f"{worker}.txt")

    def has_checkpoint(self) -> bool:
        """Whether some policy has a saved step."""
        root = self.checkpoints_path
        return os.path.isdir(root) and any(
            name.isdigit() for policy in os.listdir(root) if os.path.isdir(os.path.join(root, policy))
            for name in os.listdir(os.path.join(root, policy)))

    def write_config(self, config: dict) -> None:
        """Write ``config.json`` (creating the folder)."""
        os.makedirs(self.path, exist_ok=True)
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=2)

    def read_config(self) -> dict:
        """The run's ``config.json``.

        Raises:
          FileNotFoundError: the folder has none.
          ValueError: it is not a JSON object.
        """
        if not os.path.exists(self.config_path):
            raise FileNotFoundError(f"no run config at {self.config_path} (written by the "
                                    "launcher at start)")
        try:
            with open(self.config_path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read {self.config_path}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{self.config_path} is not a JSON object")
        return data

    def config_or_empty(self) -> dict:
        """``config.json``, or ``{}`` if it is missing or unreadable."""
        try:
            return self.read_config()
        except (OSError, ValueError):
            return {}

    def read_metrics(self, final: bool = True) -> list[dict]:
        """The records of ``metrics.jsonl`` (a line still being written is skipped; with
        ``final=False`` also the closing ``final`` record, which holds counters only).

        Raises:
          FileNotFoundError: no metrics file.
        """
        if not os.path.exists(self.metrics_path):
            raise FileNotFoundError(f"no metrics file {self.metrics_path}")
        records = []
        with open(self.metrics_path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line being written when we read
                if isinstance(record, dict) and (final or not record.get("final")):
                    records.append(record)
        return records

    @classmethod
    def of_checkpoint(cls, path: str) -> tuple["RunDir", str, int | None]:
        """``(run folder, policy, step or None)`` of ``LOGDIR/checkpoints/<policy>[/<step>]``."""
        path = os.path.abspath(path)
        step = None
        if os.path.basename(path).isdigit() and os.path.isdir(path):
            path, step = os.path.dirname(path), int(os.path.basename(path))
        return cls(os.path.dirname(os.path.dirname(path))), os.path.basename(path), step


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
