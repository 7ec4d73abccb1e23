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

A run folder belongs to one run: claimed, locked, never mixed, and never a file it did
not write deleted. :func:`jaxsrl.launch.launcher.train` calls :func:`claim` before any
other check and :func:`prepare` once every check has passed, just before it writes
``config.json``:

* :func:`claim` takes an exclusive lock on ``LOGDIR/.jaxsrl.lock`` (the ``filelock``
  library: ``flock``, released by the operating system when the process dies, so a killed
  run never leaves a stale lock), so a second live run into the same folder is refused,
  and checks the folder, deleting nothing: a folder that holds a jaxsrl run
  (:func:`holds_run`) is refused unless ``--resume`` (continue that run) or
  ``--overwrite`` (replace it); a folder that holds none is a new run's folder, whatever
  else it holds (``train.log`` from ``| tee``, a README, sources), unless it holds
  entries with the names of the layout that no jaxsrl run wrote (e.g. a ``checkpoints/``
  of another tool): those are refused, with or without ``--overwrite``.
* :func:`prepare` (``--overwrite`` only) deletes the earlier run's own entries
  (:func:`run_entries`: the names of the layout above), ``config.json`` last; every other
  file or folder stays as it is.

A folder holds a jaxsrl run when its ``config.json`` was written by jaxsrl
(:func:`is_run_config`: the ``"jaxsrl": {"format": 1, ...}`` key that
:meth:`RunDir.write_config` adds; a ``config.json`` from before that key, with string
``agent`` and ``env`` and the keys ``total_env_steps``, ``seed`` and ``logdir`` that every
launcher wrote, counts too), or when ``checkpoints/<policy>/<step>/meta/metadata`` is a
JSON object with ``policy_version`` (what every jaxsrl trainer saves).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

import filelock

import jaxsrl
from jaxsrl.experiment.events import EVENTS_NAME, read_events

log = logging.getLogger("jaxsrl")

LOCK_NAME = ".jaxsrl.lock"
CONFIG_NAME = "config.json"
METRICS_NAME = "metrics.jsonl"
CHECKPOINTS_NAME = "checkpoints"
#: What a run writes in its folder besides the lock (the layout above; ``eval.json`` is
#: ``scripts/multiseed.py``'s evaluation, ``wandb/`` the W&B files). ``--overwrite``
#: deletes these and nothing else.
RUN_ENTRIES = (CONFIG_NAME, METRICS_NAME, EVENTS_NAME, CHECKPOINTS_NAME, "errors", "eval",
               "eval.json", "population", "selfplay", "wandb_run_id", "wandb")
#: TensorBoard's event files (``events.out.tfevents.<time>.<host>``) are the run's too.
TENSORBOARD_PREFIX = "events.out.tfevents."
#: The key :meth:`RunDir.write_config` adds to ``config.json``, and its format.
MARKER_KEY, FORMAT = "jaxsrl", 1
#: Keys every ``config.json`` written before the marker holds (with string agent, env).
LEGACY_KEYS = ("agent", "env", "total_env_steps", "seed", "logdir")


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
        """Write ``config.json`` (creating the folder), marked as jaxsrl's
        (``"jaxsrl": {"format": 1, "version": ...}``, first); written to ``config.json.tmp``
        and renamed over the old file, so a kill leaves the old or the new one whole."""
        os.makedirs(self.path, exist_ok=True)
        marked = {MARKER_KEY: {"format": FORMAT, "version": jaxsrl.__version__}}
        marked.update((k, v) for k, v in config.items() if k != MARKER_KEY)  # a read one's: renewed
        tmp = self.config_path + ".tmp"  # written beside and renamed: a kill leaves one whole
        with open(tmp, "w") as f:
            json.dump(marked, f, indent=2)
        os.replace(tmp, self.config_path)

    def read_config(self) -> dict:
        """The run's ``config.json``.

        Raises:
          FileNotFoundError: the folder has none.
          ValueError: it is not a JSON object (not JSON, not UTF-8, nested too deeply);
            only these two, whatever the file holds.
        """
        if not os.path.exists(self.config_path):
            raise FileNotFoundError(f"no run config at {self.config_path} (written by the "
                                    "launcher at start)")
        try:
            with open(self.config_path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:  # (JSONDecodeError, UnicodeDecodeError)
            raise ValueError(f"cannot read {self.config_path}: {exc}") from None
        except RecursionError:
            raise ValueError(f"cannot read {self.config_path}: nested too deeply") from None
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
        Lines that are not JSON objects are skipped: never raises on the file's content.

        Raises:
          FileNotFoundError: no metrics file.
        """
        if not os.path.exists(self.metrics_path):
            raise FileNotFoundError(f"no metrics file {self.metrics_path}")
        records = []
        with open(self.metrics_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # a line being written when we read (or not ours)
                if isinstance(record, dict) and (final or not record.get("final")):
                    records.append(record)
        return records

    @classmethod
    def of_checkpoint(cls, path: str) -> tuple["RunDir", str, int | None]:
        """``(run folder, policy, step or None)`` of ``LOGDIR/checkpoints/<policy>[/<step>]``.

        A numeric last part is a step when that folder exists or when the path has the
        full ``checkpoints/<policy>/<step>`` form (a pruned or never-saved step is still a
        step of that policy, so its run folder is found; the restore then says which
        steps are kept)."""
        path = os.path.abspath(path)
        step = None
        name = os.path.basename(path)
        full_form = os.path.basename(os.path.dirname(os.path.dirname(path))) == CHECKPOINTS_NAME
        if name.isdigit() and (os.path.isdir(path) or full_form):
            path, step = os.path.dirname(path), int(name)
        return cls(os.path.dirname(os.path.dirname(path))), os.path.basename(path), step


class RunFolderError(ValueError):
    """The run folder cannot be used for this run; the message says why and what to do."""


def is_run_entry(name: str, logdir: str | None = None) -> bool:
    """Whether a folder entry ``name`` is one a run writes (:data:`RUN_ENTRIES`, TensorBoard,
    the earlier configs a resume kept: ``config.<n>.json``; with ``logdir``, such a file
    counts only if it holds jaxsrl's marker, :func:`is_run_config`)."""
    if name in RUN_ENTRIES or name.startswith(TENSORBOARD_PREFIX):
        return True
    if re.fullmatch(r"config\.\d+\.json", name) is None:
        return False
    return logdir is None or is_run_config(os.path.join(logdir, name))


def run_entries(logdir: str) -> list[str]:
    """The names in ``logdir`` that a run writes, sorted (``[]`` if it does not exist)."""
    if not os.path.isdir(logdir):
        return []
    return sorted(n for n in os.listdir(logdir) if is_run_entry(n, logdir))


#: Folders of a run that hold files by name (``errors/<worker>.txt``, ``eval/v<n>.json``):
#: ``--overwrite`` deletes only the files so named, and the folder once empty.
NAMED_FILES = {"errors": r".+\.txt", "eval": r"v\d+\.json"}


def _delete_entry(logdir: str, name: str) -> None:
    """Delete the run's entry ``name`` of ``logdir`` (in :data:`NAMED_FILES` folders, only
    the files a run writes there)."""
    target = os.path.join(logdir, name)
    if name in NAMED_FILES and os.path.isdir(target) and not os.path.islink(target):
        for child in os.listdir(target):
            path = os.path.join(target, child)
            if re.fullmatch(NAMED_FILES[name], child) and os.path.isfile(path):
                os.remove(path)
        if not os.listdir(target):
            os.rmdir(target)
    elif os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
    else:
        os.remove(target)


def is_run_config(path: str) -> bool:
    """Whether the file ``path`` is a ``config.json`` that jaxsrl wrote: a JSON object
    with the ``"jaxsrl": {"format": <int>, ...}`` marker, or (written before the marker)
    with string ``agent`` and ``env`` and every key of :data:`LEGACY_KEYS`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict):
        return False
    marker = data.get(MARKER_KEY)
    if isinstance(marker, dict) and isinstance(marker.get("format"), int):
        return True
    return (isinstance(data.get("agent"), str) and isinstance(data.get("env"), str)
            and all(k in data for k in LEGACY_KEYS))


def has_run_checkpoint(checkpoints: str) -> bool:
    """Whether ``checkpoints`` (``LOGDIR/checkpoints``) holds a step saved by a jaxsrl
    trainer: ``<policy>/<step>/meta/metadata``, a JSON object with ``policy_version``."""
    if not os.path.isdir(checkpoints):
        return False
    for policy in os.listdir(checkpoints):
        folder = os.path.join(checkpoints, policy)
        if not os.path.isdir(folder):
            continue
        for step in filter(str.isdigit, os.listdir(folder)):
            try:
                with open(os.path.join(folder, step, "meta", "metadata"), encoding="utf-8") as f:
                    meta = json.load(f)
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(meta, dict) and "policy_version" in meta:
                return True
    return False


def holds_run(logdir: str) -> bool:
    """Whether ``logdir`` holds a jaxsrl run (:func:`is_run_config` of its
    ``config.json``, or :func:`has_run_checkpoint`); other files never count."""
    run = RunDir(logdir)
    return is_run_config(run.config_path) or has_run_checkpoint(run.checkpoints_path)


def _shown(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def claim(logdir: str, resume: bool, overwrite: bool) -> filelock.BaseFileLock:
    """Lock ``logdir`` for this run (creating it) and check it may be used; deletes nothing
    (``--overwrite``'s deletion is :func:`prepare`, once the run's other checks passed).

    Args:
      logdir: the run folder.
      resume: ``--resume``: the folder's run is continued (its files stay).
      overwrite: ``--overwrite``: an earlier run in the folder is to be replaced.

    Returns:
      The held lock; ``release()`` it when the run has ended.

    Raises:
      RunFolderError: another live run holds the folder; it holds a jaxsrl run and
        neither ``resume`` nor ``overwrite`` is set; or, without ``resume``, it holds
        entries named like a run's that no jaxsrl run wrote.
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
        entries = run_entries(logdir)
        if entries and not resume:
            if not holds_run(logdir):
                raise RunFolderError(
                    f"--logdir {logdir} holds {_shown(entries)}, which no jaxsrl run wrote (no "
                    f"jaxsrl {CONFIG_NAME} or checkpoint): not using or deleting them; move "
                    "them away or give another --logdir")
            if not overwrite:
                raise RunFolderError(f"--logdir {logdir} already holds a run ({_shown(entries)}): "
                                     "add --resume to continue it, --overwrite to replace it, or "
                                     "give a new --logdir")
    except BaseException:
        lock.release()
        raise
    return lock


def prepare(logdir: str, overwrite: bool) -> list[str]:
    """Make the claimed ``logdir`` ready for the run's first write; call it once every
    check of the run has passed. With ``overwrite``, delete the earlier run's own entries
    (:func:`run_entries`), ``config.json`` last (a kill midway leaves a folder that is
    still recognised as a run, so ``--overwrite`` again finishes the job); any other file
    or folder stays.

    Returns:
      The names deleted, sorted.
    """
    if not overwrite:
        return []
    entries = run_entries(logdir)
    for name in sorted(entries, key=lambda n: n == CONFIG_NAME):
        _delete_entry(logdir, name)
    if entries:
        log.info("--overwrite: deleted the earlier run in %s (%s); other files kept", logdir,
                 ", ".join(entries))
    return entries


def remove_if_unused(logdir: str) -> None:
    """Delete ``logdir`` if it holds nothing but the lock file (a run that stopped
    before writing anything, e.g. on an unsupported space, leaves no folder behind)."""
    try:
        if os.listdir(logdir) == [LOCK_NAME]:
            os.remove(os.path.join(logdir, LOCK_NAME))
            os.rmdir(logdir)
    except OSError:
        pass  # in use again, or gone: leave it
