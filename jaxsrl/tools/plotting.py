"""Learning curves from ``LOGDIR/metrics.jsonl`` as PNG files (matplotlib, headless).

One figure (``out``) holds the episode return against environment steps and against
wall-clock time — for multi-team runs the per-team returns (``episode_return_mean/<team>``)
instead, since the mean over zero-sum teams is about 0 —, the periodic evaluation's return
against environment steps when the runs have one (``--eval_every`` writes ``eval/*`` keys:
``eval/return_mean``, per team ``eval/return_mean/<team>``) and any extra metric keys
asked for (names or shell patterns such as ``eval/*``). When the runs report episode statistics
(``episode/<name>``, e.g. hide-and-seek's phase statistics), a second figure
``<out stem>_episode.png`` shows them, one panel each::

    paths = plot_runs(["runs/a", "runs/b", "runs/c"])   # runs/a/curves.png, one curve per run
    paths = plot_runs(["runs/s0", "runs/s1"], band="mean")  # one curve: their mean and std

Each run is its own curve, labelled by its folder, unless averaging is asked for:
with ``band`` (``"mean"`` or ``"median"``) runs of the same label (default: the agent
name from ``config.json``), or with ``labels`` that repeat, form a group drawn in one
colour: each run as a thin line and, with two or more runs, their mean (bold) and
+-1 std (shaded), or with ``band="median"`` their median (bold) and min-max range
(shaded), on the x range all of them cover. The figures go into the first run's
folder unless ``out`` says otherwise. Population runs (``--population``,
``population/<quantity>/<member>`` keys) get a third figure ``<out stem>_population.png``:
each member's return and hyperparameter trajectories, exploit events marked. Used by
:mod:`jaxsrl.cli.plot` (``scripts/plot.py``); the smoothing and band arithmetic is
:mod:`jaxsrl.tools.curves`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import os
from typing import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure  # headless: no pyplot, no display

from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.tools import league
from jaxsrl.tools.curves import BANDS, aggregate, aggregate_median, smooth

RETURN_KEY = "episode_return_mean"
EVAL_RETURN_KEY = "eval/return_mean"  # jaxsrl/launch/periodic_eval.py, eval_metrics
POPULATION_PREFIX = "population/"


@dataclasses.dataclass
class Run:
    """One run's metrics: ``records`` are the lines of its ``metrics.jsonl``."""

    logdir: str
    label: str
    records: list

    def keys(self) -> set:
        return {k for r in self.records for k in r}

    def series(self, key: str, x: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` of the records where both are finite numbers; ``x="wall_time_s"``
        is made monotonic across resumed runs (each process restarts its clock)."""
        xs, ys, offset, last = [], [], 0.0, None
        for r in self.records:
            xv = r.get(x)
            if not _is_number(xv):
                continue
            if x == "wall_time_s":
                if last is not None and xv + offset < last:
                    offset = last
                xv = xv + offset
                last = xv
            yv = r.get(key)
            if _is_number(yv):
                xs.append(float(xv))
                ys.append(float(yv))
        return np.asarray(xs), np.asarray(ys)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_metrics(logdir: str) -> list:
    """The records of ``LOGDIR/metrics.jsonl`` (a truncated last line is skipped).

    Raises:
      FileNotFoundError: no metrics file.
    """
    return RunDir(logdir).read_metrics()


def default_label(logdir: str) -> str:
    """The agent name from ``config.json``, else the folder name."""
    agent = RunDir(logdir).config_or_empty().get("agent")
    if isinstance(agent, str) and agent:
        return agent
    return os.path.basename(os.path.normpath(logdir))


def run_labels(logdirs: Sequence[str]) -> list:
    """One distinct label per run folder: its name, or where names repeat its path as
    given (then ``#i`` for the same folder given twice)."""
    names = [os.path.basename(os.path.normpath(d)) for d in logdirs]
    if len(set(names)) < len(names):
        names = [os.path.normpath(d) for d in logdirs]
    if len(set(names)) < len(names):
        names = [f"{n} #{i}" for i, n in enumerate(names)]
    return names


def load_runs(logdirs: Sequence[str], labels: Sequence[str] | None = None,
              average: bool = False) -> list:
    """The runs of ``logdirs``, labelled by ``labels`` if given, else by
    :func:`default_label` (the agent name) when ``average``, else by :func:`run_labels`
    (one curve per run).

    Raises:
      FileNotFoundError: a folder without ``metrics.jsonl``.
      ValueError: not one label per folder.
    """
    if labels is not None and len(labels) != len(logdirs):
        raise ValueError(f"{len(labels)} labels for {len(logdirs)} run folders")
    if labels is None:
        labels = [default_label(d) for d in logdirs] if average else run_labels(logdirs)
    return [Run(d, labels[i], load_metrics(d)) for i, d in enumerate(logdirs)]


DEFAULT_OUT = "curves.png"  # inside the first run's folder


def _groups(runs: list) -> dict:
    groups: dict = {}
    for run in runs:
        groups.setdefault(run.label, []).append(run)
    return groups


def _panel(ax, runs: list, key: str, x: str, smoothing: float, colors: dict,
           band: str = "mean") -> bool:
    """Draw ``key`` against ``x`` for every group; False if no run has the key."""
    drawn = False
    for label, members in _groups(runs).items():
        color = colors[label]
        curves = []
        for run in members:
            xs, ys = run.series(key, x)
            if len(xs) == 0:
                continue
            ys = smooth(ys, smoothing)
            curves.append((xs, ys))
            single = len(members) == 1
            ax.plot(xs, ys, color=color, lw=1.6 if single else 0.8, alpha=1.0 if single else 0.35,
                    marker="o" if len(xs) < 3 or key.startswith("eval/") else None, ms=3,
                    label=f"{label}" if single else None)
            drawn = True
        agg = aggregate(curves) if band == "mean" else aggregate_median(curves)
        if agg is not None and band == "mean":
            grid, mean, std = agg
            ax.plot(grid, mean, color=color, lw=2.0, label=f"{label} (mean of {len(curves)})")
            ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, lw=0)
        elif agg is not None:
            grid, median, lo, hi = agg
            ax.plot(grid, median, color=color, lw=2.0,
                    label=f"{label} (median of {len(curves)}, min-max shaded)")
            ax.fill_between(grid, lo, hi, color=color, alpha=0.2, lw=0)
        elif len(curves) > 1:
            ax.plot([], [], color=color, label=f"{label} ({len(curves)} runs)")
    ax.set_title(key if x == "env_steps" else f"{key} vs wall-clock", fontsize=9)
    ax.set_xlabel("environment steps" if x == "env_steps" else "wall-clock time (s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    return drawn


def parse_reference(text: str) -> tuple[float, float, str]:
    """``"STEPS:RETURN:LABEL"`` (e.g. ``"1e6:1867:CleanRL PPO"``) -> ``(steps, return, label)``.

    Raises:
      ValueError: not three ``:``-separated fields with two numbers, naming the text.
    """
    parts = text.split(":", 2)
    try:
        if len(parts) != 3 or not parts[2]:
            raise ValueError
        return float(parts[0]), float(parts[1]), parts[2]
    except ValueError:
        raise ValueError(f"reference {text!r} must be STEPS:RETURN:LABEL, "
                         "e.g. 1e6:1867:CleanRL PPO") from None


def _draw_references(ax, references: Sequence[tuple]) -> None:
    """Published results as black markers with their label, on an env-steps panel."""
    markers = "*DsP^v"
    for i, (steps, value, label) in enumerate(references):
        ax.plot([steps], [value], linestyle="none", marker=markers[i % len(markers)], ms=9,
                color="black", label=label)


def _figure(panels: list, runs: list, smoothing: float, path: str, title: str, cols: int,
            references: Sequence[tuple] = (), time_references: Sequence[tuple] = (),
            band: str = "mean") -> str:
    cols = max(1, min(cols, len(panels)))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.6 * cols, 3.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    cmap = colormaps["tab10"]
    colors = {label: cmap(i % 10) for i, label in enumerate(_groups(runs))}
    for ax, (key, x) in zip(axes, panels):
        _panel(ax, runs, key, x, smoothing, colors, band)
        if references and key == RETURN_KEY and x == "env_steps":
            _draw_references(ax, references)
        if time_references and key == RETURN_KEY and x == "wall_time_s":
            _draw_references(ax, time_references)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        axes[0].legend(handles, labels, fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def episode_stat_keys(runs: list, patterns: Sequence[str] | None = None) -> list:
    """``episode/<name>`` keys of the runs (per-team copies ``episode/<name>/<team>``
    left out), filtered by shell-style ``patterns`` if given."""
    keys = sorted(k for run in runs for k in run.keys()
                  if k.startswith("episode/") and k.count("/") == 1)
    keys = list(dict.fromkeys(keys))
    if patterns:
        keys = [k for k in keys if any(fnmatch.fnmatch(k, p) for p in patterns)]
    return keys


def _returns(all_keys: set, key: str) -> list:
    """``[key]``, or the team returns ``key/<team>`` when there are any."""
    teams = sorted(k for k in all_keys if k.startswith(key + "/") and k != key + "/")
    return teams or [key]


def return_panels(runs: list) -> list:
    """``[(key, x), ...]`` of the return panels: ``episode_return_mean`` against steps and
    wall-clock time; for runs with team returns (``episode_return_mean/<team>``, the
    teams of a multi-agent game) each team's return against steps and wall-clock time
    instead (the mean over zero-sum teams is about 0 and says nothing). Runs with
    periodic evaluation (``eval/return_mean``) add its return, or its team returns
    ``eval/return_mean/<team>``, against steps."""
    all_keys = set().union(*(run.keys() for run in runs)) if runs else set()
    train = _returns(all_keys, RETURN_KEY)
    evaluated = _returns(all_keys, EVAL_RETURN_KEY) if any(
        k == EVAL_RETURN_KEY or k.startswith(EVAL_RETURN_KEY + "/") for k in all_keys) else []
    return ([(k, "env_steps") for k in train] + [(k, "wall_time_s") for k in train]
            + [(k, "env_steps") for k in evaluated])


def metric_keys(runs: list, keys: Sequence[str]) -> list:
    """``keys`` with each shell pattern (``*``, ``?``, ``[``; e.g. ``eval/*``) replaced by
    the runs' metric keys that match it, sorted; duplicates dropped.

    Raises:
      ValueError: a pattern that matches no key of the runs, naming it.
    """
    all_keys = sorted(set().union(*(run.keys() for run in runs))) if runs else []
    out = []
    for key in keys:
        if not any(c in key for c in "*?["):
            out.append(key)
            continue
        found = [k for k in all_keys if fnmatch.fnmatchcase(k, key)]
        if not found:
            raise ValueError(f"key pattern {key!r} matches no metric in the runs' metrics.jsonl")
        out.extend(found)
    return list(dict.fromkeys(out))


def plot_runs(logdirs: Sequence[str], out: str | None = None,
              labels: Sequence[str] | None = None,
              smoothing: float = 0.0, keys: Sequence[str] = (),
              stats: Sequence[str] | None = None, episode_stats: bool = True,
              references: Sequence[tuple] = (), time_references: Sequence[tuple] = (),
              band: str | None = None) -> list:
    """Write the learning-curve PNG(s) of ``logdirs``; returns the files written.

    Args:
      logdirs: run folders (each with ``metrics.jsonl``).
      out: PNG path of the returns figure (default ``<first run>/curves.png``); the
        other figures go beside it.
      labels: one label per run (same label = same group, averaged); default: the run
        folders' names (one curve each), or with ``band`` the agent names.
      smoothing: EMA weight in [0, 1) applied to every curve.
      keys: extra metric keys to plot against environment steps (e.g. ``loss/total``),
        or shell patterns of them (``eval/*``: every periodic-evaluation metric).
      stats: shell patterns selecting the ``episode/...`` panels (default: all).
      episode_stats: write the episode-statistics figure when there are any.
      references: ``(env_steps, return, label)`` published results drawn as markers on
        the return-vs-steps panel (see :func:`parse_reference`).
      time_references: ``(seconds from launch, return, label)`` markers on the
        return-vs-wall-clock panel.
      band: average the runs of a label: ``mean`` (mean +- std) or ``median`` (median,
        min-max); ``None`` (default): no averaging unless ``labels`` repeat (then mean).

    Raises:
      FileNotFoundError: a run folder without ``metrics.jsonl``.
      ValueError: no run folders, bad labels, smoothing or band, a key pattern that
        matches nothing.
    """
    if not logdirs:
        raise ValueError("no run folders to plot")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing={smoothing} must be in [0, 1)")
    if band is not None and band not in BANDS:
        raise ValueError(f"band={band!r}; valid: {', '.join(BANDS)}")
    runs = load_runs(logdirs, labels, average=band is not None)
    out = out or os.path.join(logdirs[0], DEFAULT_OUT)
    band = band or "mean"
    panels = return_panels(runs)
    panels += [(k, "env_steps") for k in metric_keys(runs, keys) if (k, "env_steps") not in panels]
    names = ", ".join(sorted({r.label for r in runs}))
    written = [_figure(panels, runs, smoothing, out,
                       f"{names}: {len(runs)} run(s)", cols=2 if len(panels) <= 4 else 3,
                       references=references, time_references=time_references, band=band)]
    if population_quantities(runs):
        root, ext = os.path.splitext(out)
        written.append(population_figure(runs, smoothing, f"{root}_population{ext or '.png'}"))
    if league.selfplay_policies(runs):  # self-play pools: sizes and ratings
        root, ext = os.path.splitext(out)
        written.append(league.selfplay_figure(runs, f"{root}_selfplay{ext or '.png'}"))
    stat_keys = episode_stat_keys(runs, stats) if episode_stats else []
    if stat_keys:
        root, ext = os.path.splitext(out)
        path = f"{root}_episode{ext or '.png'}"
        written.append(_figure([(k, "env_steps") for k in stat_keys], runs, smoothing, path,
                               f"{names}: episode statistics", cols=4, band=band))
    return written


def population_quantities(runs: list) -> dict:
    """``{quantity: [members]}`` of the runs' ``population/<quantity>/<member>`` keys
    (``return`` first, then the hyperparameters; the per-round ``fitness`` left out)."""
    found: dict = {}
    for key in sorted(set().union(*(run.keys() for run in runs)) if runs else ()):
        parts = key.split("/")
        if len(parts) == 3 and key.startswith(POPULATION_PREFIX) and parts[1] != "fitness":
            found.setdefault(parts[1], []).append(parts[2])
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "return", kv[0])))


def population_events(logdir: str) -> list:
    """The exploit-and-explore records of ``LOGDIR/population/events.jsonl`` (``[]``
    without one; see ``jaxsrl/workers/population/store.py``)."""
    path = RunDir(logdir).population_file("events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def population_figure(runs: list, smoothing: float, path: str) -> str:
    """One panel per population quantity (return, then each hyperparameter): every
    member of every population run (others are left out) as a line (colour: member; line style: run), each exploit
    event marked (x) at its env steps on the member's hyperparameter panels, at the new
    value. Spread-out positive hyperparameters get a log axis."""
    runs = [run for run in runs if any(k.startswith(POPULATION_PREFIX) for k in run.keys())]
    quantities = population_quantities(runs)
    members = sorted({m for ms in quantities.values() for m in ms})
    colors = {m: colormaps["tab10"](i % 10) for i, m in enumerate(members)}
    styles = ["-", "--", ":", "-."]
    cols = min(3, len(quantities))
    rows = math.ceil(len(quantities) / cols)
    fig = Figure(figsize=(4.6 * cols, 3.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (quantity, names) in zip(axes, quantities.items()):
        values = []
        for r, run in enumerate(runs):
            for m in names:
                xs, ys = run.series(f"{POPULATION_PREFIX}{quantity}/{m}")
                if len(xs):
                    ax.plot(xs, smooth(ys, smoothing) if quantity == "return" else ys,
                            color=colors[m], ls=styles[r % len(styles)], lw=1.2,
                            label=m if r == 0 else None)
                    values.extend(ys)
            if len(runs) > 1:  # one legend entry per run: its line style
                ax.plot([], [], color="gray", ls=styles[r % len(styles)], label=run.label)
            if quantity == "return":
                continue
            for e in population_events(run.logdir):
                if quantity in e.get("after", {}) and e.get("member") in colors:
                    ax.plot([e["env_steps"]], [e["after"][quantity]], "x", ms=6,
                            color=colors[e["member"]])
                    values.append(e["after"][quantity])
        if quantity != "return" and values and min(values) > 0 and max(values) / min(values) > 20:
            ax.set_yscale("log")
        ax.set_title("episode return per member" if quantity == "return"
                     else f"{quantity} per member (x: exploit)", fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(quantities):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"population: {', '.join(sorted({r.label for r in runs}))}", fontsize=10)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
