"""Several seeds of one training command, each in its own run folder, and their summary.

``run_seeds`` launches ``python -m jaxsrl.cli.train ARGS --seed=S --logdir=ROOT/seed_S``
(the command of ``scripts/train.py``) for each seed (in sequence on this machine, or as
Ray tasks with ``ray_cpus``), then a deterministic evaluation of each
(``python -m jaxsrl.cli.evaluate --json``), and writes
``ROOT/summary.json``: per seed the exit code, the wall-clock of the whole command, the
training return at the end, the evaluation return, and the first env step and time
from launch at which the training return reached ``threshold``; across seeds their
medians. ``scripts/seeds.py`` is the command line::

    python scripts/seeds.py --root runs/cheetah --seeds 0 1 2 3 4 --threshold 3000 \
        -- --env=HalfCheetah-v5
    python scripts/plot.py runs/cheetah/seed_* --band median --out cheetah.png   # median, min-max

The time from launch is the run's own ``wall_time_s`` (seconds since its process
started; see ``jaxsrl.experiment.metrics.Clock``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Sequence

from jaxsrl.tools.plotting import RETURN_KEY, load_metrics
from jaxsrl.core.paths import child_env

TRAIN = ["-m", "jaxsrl.cli.train"]
EVALUATE = ["-m", "jaxsrl.cli.evaluate"]


def first_crossing(records: list, threshold: float, key: str = RETURN_KEY) -> dict | None:
    """The first record whose ``key`` is ``>= threshold``: ``{"env_steps", "wall_time_s"}``."""
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v) and v >= threshold:
            return {"env_steps": r.get("env_steps"), "wall_time_s": r.get("wall_time_s")}
    return None


def last_return(records: list, key: str = RETURN_KEY) -> float | None:
    """The last finite ``key`` of a run's records (``None`` if it never reported one)."""
    vals = [r[key] for r in records if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return float(vals[-1]) if vals else None


def summarise_seed(logdir: str, threshold: float | None) -> dict:
    """What one seed's run folder says: final training return, steps, crossing, eval."""
    records = load_metrics(logdir)
    out = {"logdir": logdir, "final_return": last_return(records),
           "env_steps": max((r.get("env_steps", 0) for r in records), default=0)}
    if threshold is not None:
        out["reached"] = first_crossing(records, threshold)
    eval_path = os.path.join(logdir, "eval.json")
    if os.path.exists(eval_path):
        with open(eval_path) as f:
            out["eval_return"] = json.load(f)["summary"]["return_mean"]
    return out


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(seeds: list[dict], threshold: float | None) -> dict:
    """Medians across seeds; a seed that never reached ``threshold`` counts as infinity."""
    out = {"seeds": len(seeds),
           "median_final_return": _median([s.get("final_return") for s in seeds]),
           "median_eval_return": _median([s.get("eval_return") for s in seeds])}
    if threshold is not None:
        times = [s["reached"]["wall_time_s"] if s.get("reached") else math.inf for s in seeds]
        steps = [s["reached"]["env_steps"] if s.get("reached") else math.inf for s in seeds]
        out.update(threshold=threshold, reached=sum(1 for s in seeds if s.get("reached")),
                   median_time_to_threshold_s=statistics.median(times),
                   median_steps_to_threshold=statistics.median(steps))
    return out


def _command(train_args: Sequence[str], seed: int, logdir: str) -> list[str]:
    return [sys.executable, *TRAIN, *train_args, f"--seed={seed}", f"--logdir={logdir}"]


def _run_one(train_args: Sequence[str], seed: int, logdir: str, eval_episodes: int) -> dict:
    """Train one seed, then evaluate it; the exit codes and the command's wall-clock."""
    t0 = time.monotonic()
    rc = subprocess.call(_command(train_args, seed, logdir), env=child_env())
    out = {"seed": seed, "train_rc": rc, "command_s": time.monotonic() - t0}
    if rc == 0 and eval_episodes > 0:
        out["eval_rc"] = subprocess.call([sys.executable, *EVALUATE, f"--logdir={logdir}",
                                          f"--episodes={eval_episodes}",
                                          f"--json={os.path.join(logdir, 'eval.json')}"],
                                         env=child_env())
    return out


def run_seeds(train_args: Sequence[str], seeds: Sequence[int], root: str,
              threshold: float | None = None, eval_episodes: int = 10,
              ray_cpus: float = 0.0) -> dict:
    """Run ``train_args`` once per seed under ``root``; returns (and writes) the summary.

    Args:
      train_args: flags for ``scripts/train.py`` (no ``--seed``/``--logdir``).
      seeds: the seeds, one run folder ``root/seed_<s>`` each.
      root: parent folder; must not hold a ``seed_<s>`` folder already.
      threshold: training return whose first crossing is reported (``None``: none).
      eval_episodes: deterministic evaluation episodes per seed after training (0: none).
      ray_cpus: > 0: run the seeds as Ray tasks of this many CPUs each (placed by Ray,
        concurrently where the cluster has room); 0: one after the other here.

    Raises:
      ValueError: ``--seed``/``--logdir`` in ``train_args``, no seeds, or a seed folder
        that exists already.
      ImportError: ``ray_cpus > 0`` without Ray installed (the [ray] extra).
    """
    bad = [a for a in train_args if a.split("=")[0] in ("--seed", "--logdir")]
    if bad:
        raise ValueError(f"{bad[0]!r}: the seed runner sets --seed and --logdir itself")
    if not seeds:
        raise ValueError("no seeds given")
    dirs = {s: os.path.join(root, f"seed_{s}") for s in seeds}
    taken = [d for d in dirs.values() if os.path.exists(d)]
    if taken:
        raise ValueError(f"{taken[0]} exists already: choose another --root")
    os.makedirs(root, exist_ok=True)
    if ray_cpus > 0:
        try:
            import ray  # noqa: PLC0415  (optional dependency: the [ray] extra, only for --ray_cpus)
        except ImportError as exc:
            raise ImportError(f"--ray_cpus runs seeds on Ray, which is not installed ({exc}): "
                              "pip install -e '.[ray]'") from exc
        ray.init(ignore_reinit_error=True)
        task = ray.remote(num_cpus=ray_cpus)(_run_one)
        runs = ray.get([task.remote(list(train_args), s, dirs[s], eval_episodes) for s in seeds])
    else:
        runs = [_run_one(train_args, s, dirs[s], eval_episodes) for s in seeds]
    per_seed = [{**r, **summarise_seed(dirs[r["seed"]], threshold)} for r in runs]
    summary = {"command": ["scripts/train.py", *train_args], "per_seed": per_seed,
               **summarise(per_seed, threshold)}
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    return summary


def format_table(summary: dict) -> str:
    """A markdown table of the per-seed results and the medians."""
    thr = summary.get("threshold")
    head = "| seed | train return at end | eval return | env steps |"
    head += f" steps to {thr:g} | time to {thr:g} (s) |" if thr is not None else ""
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    fmt = lambda v, spec=",.0f": "-" if v is None or v == math.inf else format(v, spec)
    for s in summary["per_seed"]:
        row = (f"| {s['seed']} | {fmt(s.get('final_return'))} | {fmt(s.get('eval_return'))} |"
               f" {fmt(s.get('env_steps'))} |")
        if thr is not None:
            r = s.get("reached") or {}
            row += f" {fmt(r.get('env_steps'))} | {fmt(r.get('wall_time_s'), '.0f')} |"
        rows.append(row)
    med = (f"| median | {fmt(summary['median_final_return'])} | {fmt(summary['median_eval_return'])} | |")
    if thr is not None:
        med += (f" {fmt(summary['median_steps_to_threshold'])} |"
                f" {fmt(summary['median_time_to_threshold_s'], '.0f')} |")
    rows.append(med)
    return "\n".join(rows)
