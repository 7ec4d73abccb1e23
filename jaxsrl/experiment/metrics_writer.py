"""The log sinks of a run: each interval's metrics record (see
:mod:`jaxsrl.experiment.metrics`) written to ``metrics.jsonl``, TensorBoard, optional
W&B and a terminal progress bar, and the helpers that read a record (returns, the
console line).
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from jaxsrl.experiment.run_dir import RunDir

log = logging.getLogger("jaxsrl.experiment.metrics")


def returns_of(record: dict) -> dict:
    """The episode returns of a record: ``episode_return_mean`` and, for multi-team
    games, ``episode_return_mean/<team>`` (finite numbers only)."""
    return {k: float(v) for k, v in record.items()
            if (k == "episode_return_mean" or k.startswith("episode_return_mean/"))
            and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def return_text(returns: dict) -> str:
    """``return 21.50``, or per team (``hider 0.62  seeker -0.62``) when the record
    has team returns (the mean over zero-sum teams is always about 0); ``return -``
    when no episode has finished yet."""
    teams = {k.split("/", 1)[1]: v for k, v in returns.items() if k.startswith("episode_return_mean/")}
    teams = {t: v for t, v in teams.items() if t}  # agents of a game without team_of: no team
    if teams:
        return "  ".join(f"{team} {value:.2f}" for team, value in sorted(teams.items()))
    ret = returns.get("episode_return_mean")
    return f"return {ret:.2f}" if ret is not None else "return -"


class MetricsWriter:
    """Writes each interval's record to every configured sink of a run.

    * ``LOGDIR/metrics.jsonl``: one JSON object per line (always; non-finite floats
      become ``null``).
    * TensorBoard event files in ``LOGDIR`` (``tensorboardX``): every numeric value as
      a scalar against ``env_steps``, and the resolved config as text. On by default
      when ``tensorboardX`` is installed; ``JAXSRL_TENSORBOARD=0`` turns it off.
    * Weights & Biases, only when ``JAXSRL_WANDB=1`` (``wandb`` is imported lazily):
      project ``JAXSRL_WANDB_PROJECT`` (default ``jaxsrl``), entity
      ``JAXSRL_WANDB_ENTITY``; the run id is kept in ``LOGDIR/wandb_run_id`` so that
      ``--resume`` continues the same W&B run. ``WANDB_MODE=offline`` works as usual.
    * A live progress bar on stderr (rich) with env steps, FPS, episode return (per
      team for multi-team games; the last known one in intervals where no episode
      ended, and at the end), policy version, elapsed time and ETA, only when stderr is a terminal (so CI logs stay
      plain); ``JAXSRL_PROGRESS=1``/``0`` forces it on/off. While it is shown, log lines
      of the ``logging`` stream handlers print above it.

    The run's ``total_env_steps`` (for the bar and the ETA) and the config come from
    ``LOGDIR/config.json``, which the launcher writes before creating the writer.
    A sink that fails is reported once and dropped; training goes on.

    Args:
      logdir: the run folder.
      progress, tensorboard, wandb: force a sink on/off (``None``: environment
        variables and defaults above).
      console: a ``rich.console.Console`` for the progress bar (default: stderr).
    """

    def __init__(self, logdir: str, *, progress: bool | None = None,
                 tensorboard: bool | None = None, wandb: bool | None = None,
                 console: Any = None):
        self.logdir = logdir
        run = RunDir(logdir)
        self.path = run.metrics_path
        self.config = run.config_or_empty()
        total = self.config.get("total_env_steps")
        self.total_env_steps = int(total) if isinstance(total, (int, float)) else None
        self._file = open(self.path, "a", buffering=1)
        self._closed = False
        #: the newest returns written (:func:`returns_of`), kept across intervals in which
        #: no episode ended (e.g. the closing record).
        self.last_returns: dict = {}
        self.tensorboard = self.wandb_run = self.progress = None
        if _flag("JAXSRL_TENSORBOARD", True) if tensorboard is None else tensorboard:
            self.tensorboard = _open_tensorboard(logdir, self.config)
        if _flag("JAXSRL_WANDB", False) if wandb is None else wandb:
            self.wandb_run = _open_wandb(logdir, self.config)
        if progress is None:
            progress = _flag("JAXSRL_PROGRESS", None)
            if progress is None:
                progress = console is not None or _stderr_is_terminal()
        if progress:
            try:
                self.progress = ProgressBar(self.total_env_steps, _run_title(self.config, logdir),
                                            console)
            except Exception as exc:  # noqa: BLE001 - a bar is never worth a failed run
                log.warning("no progress bar: %r", exc)

    def write(self, record: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in record.items()}
        self._file.write(json.dumps(clean) + "\n")
        self.last_returns = returns_of(record) or self.last_returns
        step = int(record.get("env_steps", 0))
        scalars = numeric_items(record)
        if self.tensorboard is not None:
            try:
                for key, value in scalars.items():
                    if key != "env_steps":
                        self.tensorboard.add_scalar(key, value, step)
            except Exception as exc:  # noqa: BLE001
                log.warning("TensorBoard logging failed, disabled: %r", exc)
                self.tensorboard = None
        if self.wandb_run is not None:
            try:
                self.wandb_run.log(scalars, step=step)
            except Exception as exc:  # noqa: BLE001
                log.warning("W&B logging failed, disabled: %r", exc)
                self.wandb_run = None
        if self.progress is not None:
            try:
                self.progress.update({**self.last_returns, **record})
            except Exception as exc:  # noqa: BLE001
                log.warning("progress bar failed, disabled: %r", exc)
                self.progress.close()
                self.progress = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self.progress is not None:
            self.progress.close()
        if self.tensorboard is not None:
            try:
                self.tensorboard.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing TensorBoard writer: %r", exc)
        if self.wandb_run is not None:
            try:
                self.wandb_run.finish()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing W&B run: %r", exc)


def numeric_items(record: dict) -> dict:
    """The finite numbers of a record (no bools, strings or ``None``), as floats."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _flag(name: str, default: bool | None) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return default


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def _run_title(config: dict, logdir: str) -> str:
    parts = [str(config[k]) for k in ("agent", "env") if config.get(k)]
    return " ".join(parts) or os.path.basename(os.path.abspath(logdir))


def _open_tensorboard(logdir: str, config: dict):
    try:
        from tensorboardX import SummaryWriter  # noqa: PLC0415  (optional at run time: a missing one only warns)
    except ImportError:
        log.warning("tensorboardX is not installed: no TensorBoard event files "
                    "(pip install tensorboardX; JAXSRL_TENSORBOARD=0 silences this)")
        return None
    try:
        writer = SummaryWriter(logdir=logdir, flush_secs=10)
        if config:
            writer.add_text("config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)
        return writer
    except Exception as exc:  # noqa: BLE001
        log.warning("no TensorBoard event files: %r", exc)
        return None


def _open_wandb(logdir: str, config: dict):
    try:
        import wandb  # noqa: PLC0415  (optional dependency: the [wandb] extra)
    except ImportError:
        log.warning("JAXSRL_WANDB is set but wandb is not installed (pip install -e '.[wandb]'); "
                    "logging to metrics.jsonl and TensorBoard only")
        return None
    id_path = RunDir(logdir).wandb_id_path
    try:
        with open(id_path) as f:
            run_id = f.read().strip()
    except OSError:
        run_id = ""
    if not run_id:
        run_id = secrets.token_hex(8)
        with open(id_path, "w") as f:
            f.write(run_id + "\n")
    try:
        return wandb.init(project=os.environ.get("JAXSRL_WANDB_PROJECT", "jaxsrl"),
                          entity=os.environ.get("JAXSRL_WANDB_ENTITY") or None,
                          name=os.path.basename(os.path.abspath(logdir)), id=run_id,
                          resume="allow", dir=logdir, config=config)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not start a W&B run: %r", exc)
        return None


def format_duration(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03`` style, ``-:--`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressBar:
    """A rich progress bar over env steps; ``update(record)`` once per interval.

    The ETA is the remaining steps over an exponential moving average of the
    intervals' FPS, measured only over intervals that began after the policy's first
    update of this process (``policy_version`` above the first record's): before that
    the learner is compiling and the rate says nothing, so the bar shows ``ETA -:--``.
    """

    def __init__(self, total: int | None, title: str, console: Any = None):
        self.total = total
        self._fps: float | None = None
        self._first_version: int | None = None  # policy_version of the first record
        self._last_version: int | None = None  # of the previous record
        self._console = console or Console(stderr=True)
        original = (sys.stdout, sys.stderr)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[steps]}"), TextColumn("{task.fields[fps]}"),
            TextColumn("{task.fields[ret]}"), TextColumn("{task.fields[version]}"),
            TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"),
            console=self._console, refresh_per_second=2, transient=False)
        self._task = self._progress.add_task(title, total=total, steps="", fps="", ret="",
                                             version="", eta="-:--")
        self._progress.start()
        # rich replaced sys.stderr by a proxy that prints above the bar (terminals
        # only); point the logging handlers that wrote to the real streams at it.
        self._swapped = []
        if sys.stderr is not original[1]:
            for handler in _stream_handlers():
                if handler.stream in original or handler.stream in (sys.__stderr__, sys.__stdout__):
                    self._swapped.append((handler, handler.setStream(sys.stderr)))
        self.update({"env_steps": 0})

    def update(self, record: dict) -> None:
        steps = int(record.get("env_steps", 0))
        fps = record.get("fps")
        version = record.get("policy_version")
        if isinstance(version, (int, float)):
            if self._first_version is None:
                self._first_version = version
            # The interval began after an update: compilation is over, the rate is real.
            measured = self._last_version is not None and self._last_version > self._first_version
            if measured and isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0:
                self._fps = fps if self._fps is None else 0.5 * self._fps + 0.5 * fps
            self._last_version = version
        eta = None
        if self.total and self._fps:
            eta = max(self.total - steps, 0) / self._fps
        steps_text = f"{steps:,}" + (f"/{self.total:,}" if self.total else "") + " steps"
        self._progress.update(
            self._task, completed=steps, steps=steps_text,
            fps=f"{fps:,.0f} fps" if isinstance(fps, (int, float)) else "",
            ret=return_text(returns_of(record)),
            version=f"v{record.get('policy_version', 0)}", eta=format_duration(eta))

    def close(self) -> None:
        for handler, stream in self._swapped:
            handler.setStream(stream)
        self._swapped = []
        self._progress.stop()


def _stream_handlers() -> list:
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]


def console_line(record: dict) -> str:
    """One human-readable line for the console."""
    parts = [f"steps {record['env_steps']:>9,}", f"fps {record['fps']:>8,.0f}",
             f"v {record['policy_version']:>5}"]
    if isinstance(record.get("episode_return_mean"), (int, float)):
        parts.append(f"return {record['episode_return_mean']:8.2f}")
    for key in sorted(record):  # per-team returns of multi-agent envs
        if key.startswith("episode_return_mean/") and isinstance(record[key], (int, float)):
            parts.append(f"{key.split('/', 1)[1]} {record[key]:.2f}")
    for key in ("staleness_mean", "loss/total", "approx_kl"):
        if isinstance(record.get(key), (int, float)):
            parts.append(f"{key.split('/')[-1]} {record[key]:.3g}")
    parts.append(f"t {record['wall_time_s']:6.1f}s")
    return "  ".join(parts)
