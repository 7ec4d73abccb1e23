"""Run events: faults, restarts and recoveries as structured records in the run folder.

A log line says what happened to a person; an event says it to a program. Where the
runtime logs something a user or a tool may want to find again after the run (an actor
restarted and why, a checkpoint set aside as unreadable, a run resumed from a version,
a replay refilled), it calls :func:`emit` instead of ``log.warning``: the line is
logged as before and, while a run records (:func:`recording`, opened by
:func:`jaxsrl.launch.launcher.train` for its run folder), one JSON record is appended
to ``LOGDIR/run_events.jsonl``::

    {"time": 1764597600.12, "event": "actor_restart", "level": "WARNING",
     "message": "actor 1 killed by SIGKILL; restarting it ...", "actor": "actor 1",
     "reason": "killed by SIGKILL", "restart": 1}

Events are recorded whatever the logging level (a run logged at WARNING still records
its INFO events). Read them with :func:`read_events`. Only the accelerator process
records (and, once it is lost under ``--launcher=ray``, the driver: :func:`append`):
actor processes report through exit codes and error files, which the launcher turns
into events.

Kinds, with their fields:

* ``run_start``: agent, env, resume, launcher, inference, pid, devices (learner's and
  inference's, one line)
* ``actor_restart``: actor, actor_id, reason, error (its first line), error_file (the whole
  traceback, if any), code (exit code), restart, delay_s
* ``actor_hang``: actor, actor_id, silent_s
* ``server_restart``: server, reason, error, restart
* ``thread_abandoned``: thread (serial mode)
* ``resumed``: policy, version, env_steps
* ``hyperparameters_changed``: policy, changed (name -> [old, new]): values of the
  resumed config written into the restored learner state (``jaxsrl/experiment/resume.py``)
* ``config_changed``: changed (setting -> [old, new]), previous (the kept ``config.<n>.json``)
* ``checkpoint_retry``: directory, step, error (its first failed restore; tried once more)
* ``checkpoint_unreadable``: directory, step, error (failed twice)
* ``checkpoint_set_aside``: directory, step, restored, moved_to
* ``buffer_restart``: buffer, reason, error, restart
* ``replay_restored``: learner, step, items
* ``replay_refill``: learner, step, reason (``"not saved"``, ``"does not fit"`` with
  error, ``"buffer processes"``)
* ``node_lost`` (``--launcher=ray``): node_id, node_ip, processes (``{"module",
  "actor_id", "pid"}`` each: this run's processes that were on the node when Ray
  declared it dead; ``jaxsrl/launch/ray_nodes.py``)
* ``accelerator_lost`` (``--launcher=ray``; recorded by the driver, the run being gone):
  node_ip, node_id, pid (the accelerator process: learner, and inference unless
  ``--remote_inference``), reason (Ray's words, one line); the run stopped
  (``jaxsrl/launch/ray_loss.py``)
* ``no_env_steps``: seconds (of the run with no env step counted by its learners yet;
  logged at 300 s, then at doubling times: ``jaxsrl/launch/control.py``)
* ``run_end``: env_steps, checkpoints (policy -> saved version or null)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from typing import Any, Iterator

EVENTS_NAME = "run_events.jsonl"

_lock = threading.Lock()
_sinks: list = []  # event files of the runs recording in this process


class _Sink:
    """An events file, opened (created) at its first event: a run that records nothing
    leaves no file, so a refused run leaves its folder as it found it."""

    def __init__(self, path: str):
        self.path, self.file = path, None

    def write(self, line: str) -> None:
        if self.file is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed in recording)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def emit(logger: logging.Logger, level: int, kind: str, fields: dict, msg: str, *args) -> None:
    """Log ``msg % args`` at ``level`` and record it as a ``kind`` event with ``fields``.

    Args:
      logger: where the line is logged.
      level: a ``logging`` level (``logging.WARNING``, ...).
      kind: the event's name (module docstring).
      fields: JSON-serialisable details (others are written with ``str``).
      msg, args: the log line, as for ``logger.log``.
    """
    logger.log(level, msg, *args)
    with _lock:
        if not _sinks:
            return
        line = _line(level, kind, fields, msg % args if args else msg)
        for sink in _sinks:
            sink.write(line)


def append(path: str, level: int, kind: str, fields: dict, message: str) -> None:
    """Append one ``kind`` event to the events file ``path`` (created if missing) without
    logging it: for a process that records on behalf of a run that is gone (the Ray
    driver naming a lost accelerator process, ``jaxsrl/launch/ray_loss.py``).

    Raises:
      OSError: ``path`` cannot be written.
    """
    sink = _Sink(path)
    try:
        with _lock:
            sink.write(_line(level, kind, fields, message))
    finally:
        sink.close()


def _line(level: int, kind: str, fields: dict, message: str) -> str:
    return json.dumps({"time": time.time(), "event": kind, "level": logging.getLevelName(level),
                       "message": message, **fields}, default=str)


@contextlib.contextmanager
def recording(path: str) -> Iterator[None]:
    """Append the events emitted in this process to ``path`` while the block runs (the
    file is created at the first event)."""
    sink = _Sink(path)
    with _lock:
        _sinks.append(sink)
    try:
        yield
    finally:
        with _lock:
            _sinks.remove(sink)
        sink.close()


def read_events(path: str, kind: str | None = None) -> list[dict[str, Any]]:
    """The records of an events file (of one ``kind``, or all), oldest first; ``[]`` if
    the file does not exist. A line cut short by a crash, or that is not a JSON object,
    is skipped (never raises on the file's content)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if not isinstance(record, dict):
                continue
            if kind is None or record.get("event") == kind:
                out.append(record)
    return out
