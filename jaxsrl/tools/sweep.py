"""Independent runs (grid or random sweeps) on Ray Tune: one jaxsrl run per trial.

Sweeps are not the population manager's job (that trains members together and copies
between them); here every trial is an ordinary, independent run of
``python -m jaxsrl.cli.train TRAIN_ARGS --<name>=<value> ... --logdir=ROOT/trials/<id>``
(the command of ``scripts/train.py``), in its own run folder. Ray Tune does the
scheduling (trial placement on this machine or a cluster, concurrency, retries,
search algorithms); this module only turns train flags into a Tune search space, runs
the command per trial, streams its ``metrics.jsonl`` records to Tune as the trial's
results (so a Tune scheduler such as ASHA can stop it early), and writes a summary
table. ``scripts/sweep.py`` is the command line::

    python scripts/sweep.py --root runs/lr_sweep --num_samples 8 --max_concurrent 2 \\
        --axis 'ppo.learning_rate=loguniform(1e-5,1e-2)' --axis 'seed=choice(0,1)' \\
        -- --env=CartPole-v1 --total_env_steps=200000

Axes (``NAME=KIND(ARGS)``, NAME a train flag without ``--``; values are Python
literals): ``uniform(lo,hi)``, ``loguniform(lo,hi)``, ``randint(lo,hi)`` (``hi``
excluded), ``choice(v1,v2,...)`` (drawn per sample) and ``grid(v1,v2,...)`` (every
value, each ``num_samples`` times: Tune's ``grid_search``).

Writes ``ROOT/summary.json`` and ``ROOT/summary.md``: per trial its values, exit code,
final (the last reported) and best training return (``episode_return_mean``), env steps, wall-clock
seconds and run folder, best first. Tune's own files are in ``ROOT/tune/``.

Needs Ray Tune (``pip install 'ray[tune]'``, in the ``[tune]`` extra).
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import time
from typing import Any, Sequence

from jaxsrl.core.paths import child_env
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.run_dir import RunDir

TRAIN = ["-m", "jaxsrl.cli.train"]
RETURN_KEY = "episode_return_mean"
KINDS = ("uniform", "loguniform", "randint", "choice", "grid")
_AXIS = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*=\s*(\w+)\s*\((.*)\)\s*$")
_OWN_FLAGS = ("--logdir", "--resume", "--overwrite")


def parse_axis(text: str) -> tuple[str, str, tuple]:
    """``"ppo.learning_rate=loguniform(1e-5,1e-2)"`` -> ``("ppo.learning_rate", "loguniform", (1e-05, 0.01))``.

    Raises:
      ValueError: not ``NAME=KIND(ARGS)``, an unknown kind, arguments that are not
        Python literals, or the wrong number of them, naming the axis.
    """
    m = _AXIS.match(text)
    if not m:
        raise ValueError(f"axis {text!r}: expected NAME=KIND(ARGS), e.g. 'ppo.learning_rate=loguniform(1e-5,1e-2)'")
    name, kind, body = m.groups()
    if kind not in KINDS:
        raise ValueError(f"axis {text!r}: unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    try:
        args = ast.literal_eval(f"({body},)") if body.strip() else ()
    except (ValueError, SyntaxError):
        raise ValueError(f"axis {text!r}: arguments must be Python literals") from None
    if kind in ("uniform", "loguniform", "randint"):
        if len(args) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool)
                                     for a in args) or not args[0] < args[1]:
            raise ValueError(f"axis {text!r}: {kind} takes two numbers lo < hi")
        if kind == "loguniform" and args[0] <= 0:
            raise ValueError(f"axis {text!r}: loguniform needs lo > 0")
    elif not args:
        raise ValueError(f"axis {text!r}: {kind} needs at least one value")
    return name, kind, tuple(args)


def import_ray_tune():
    """``(ray, ray.tune)``, imported on first use (Ray Tune is the optional [tune] extra).

    Raises:
      ImportError: Ray Tune is not installed (one line naming the extra).
    """
    try:
        import ray  # noqa: PLC0415  (optional dependency: the [tune] extra)
        from ray import tune  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(f"sweeps run on Ray Tune, which is not installed ({exc}): "
                          "pip install -e '.[tune]'") from exc
    return ray, tune


def search_space(axes: Sequence[tuple[str, str, tuple]]) -> dict:
    """Tune's ``param_space`` for parsed axes (:func:`parse_axis`)."""
    _, tune = import_ray_tune()
    make = {"uniform": tune.uniform, "loguniform": tune.loguniform, "randint": tune.randint,
            "choice": lambda *v: tune.choice(list(v)), "grid": lambda *v: tune.grid_search(list(v))}
    _check_unique(axes)
    return {name: make[kind](*args) for name, kind, args in axes}


def _check_unique(axes: Sequence[tuple[str, str, tuple]]) -> None:
    names = [name for name, _, _ in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"an axis is given twice: {sorted({n for n in names if names.count(n) > 1})}")


def flags_of(values: dict) -> list[str]:
    """``{"ppo.learning_rate": 0.001, "seed": 1}`` -> ``["--ppo.learning_rate=0.001", "--seed=1"]``."""
    return [f"--{name}={value}" for name, value in values.items()]


def check_args(train_args: Sequence[str], axes: Sequence[tuple[str, str, tuple]]) -> None:
    """Refuse train flags the sweep sets itself, and check that the train command with
    each axis' first value parses, before any trial starts.

    Raises:
      ValueError: ``--logdir``/``--resume``/``--overwrite`` or an axis' flag among
        ``train_args``, an axis given twice, or a config error of the command with the
        axes' values (its one-line message).
    """
    _check_unique(axes)
    searched = {f"--{name}" for name, _, _ in axes}
    for arg in train_args:
        flag = arg.split("=")[0]
        if flag in _OWN_FLAGS:
            raise ValueError(f"{flag} is set by the sweep (one run folder per trial)")
        if flag in searched:
            raise ValueError(f"{flag} is both a train flag and an axis: give it in one place")
    example = {name: args[0] for name, kind, args in axes}
    try:
        load_config([*train_args, *flags_of(example)]).validate()
    except SystemExit:
        raise ValueError(f"the train command {' '.join([*train_args, *flags_of(example)])!r} "
                         "does not parse (see the message above)") from None


def _records(path: str, start: int) -> tuple[list[dict], int]:
    """Complete records of ``metrics.jsonl`` from byte ``start``; the next start."""
    if not os.path.exists(path):
        return [], start
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out, start + end


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def run_trial(config: dict, train_args: Sequence[str], logdir: str, report, poll_s: float = 2.0) -> dict:
    """Run one trial's train command to its end, calling ``report(record)`` for each new
    metrics record (Tune's ``tune.report``); returns the trial's summary."""
    argv = [sys.executable, *TRAIN, *train_args, *flags_of(config), f"--logdir={logdir}"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=child_env())
    offset, best, final, last = 0, None, None, {}
    try:
        while True:
            done = proc.poll() is not None
            records, offset = _records(RunDir(logdir).metrics_path, offset)
            for r in records:
                value = _finite(r.get(RETURN_KEY))
                if value is not None:  # the closing record has no return: keep the last one
                    final, best = value, value if best is None else max(best, value)
                last = r
                report({k: v for k, v in r.items() if isinstance(v, (int, float))})
            if done:
                break
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:  # Tune stopped the trial (a scheduler), or an error
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"rc": proc.returncode, "final_return": final,
            "best_return": best, "env_steps": last.get("env_steps"),
            "wall_s": time.monotonic() - started, "logdir": logdir}


def _trainable(config: dict, train_args: Sequence[str] = (), root: str = "") -> None:
    from ray import tune  # noqa: PLC0415  (optional dependency: the [tune] extra)

    trial_id = tune.get_context().get_trial_id()
    logdir = os.path.join(root, "trials", trial_id)
    summary = run_trial(config, train_args, logdir, tune.report)
    with open(os.path.join(root, "trials", f"{trial_id}.json"), "w") as f:
        json.dump({"trial": trial_id, "config": config, **summary}, f)
    tune.report({"rc": summary["rc"],
                 **{k: summary[k] for k in ("final_return", "best_return") if summary[k] is not None}})


def run_sweep(train_args: Sequence[str], axes: Sequence[str], root: str, num_samples: int = 1,
              max_concurrent: int = 1, cpus_per_trial: float = 2.0,
              ray_address: str | None = None) -> dict:
    """Run the sweep (module docstring) and write its summary.

    Args:
      train_args: the train command's flags, shared by every trial.
      axes: ``NAME=KIND(ARGS)`` strings (:func:`parse_axis`).
      root: the sweep's folder (must not exist yet, or be empty).
      num_samples: Tune's ``num_samples`` (each grid point is repeated this often).
      max_concurrent: trials running at once.
      cpus_per_trial: CPUs Ray reserves for each trial (a run uses actors + learner).
      ray_address: a running Ray cluster (``None``: start one on this machine).

    Returns:
      ``{"trials": [per-trial summaries, best final return first], "root": root}``.

    Raises:
      ValueError: a bad axis, a refused or unparsable train flag, a non-empty ``root``.
      ImportError: Ray Tune is not installed (the [tune] extra).
    """
    parsed = [parse_axis(a) for a in axes]
    if not parsed:
        raise ValueError("a sweep needs at least one --axis")
    if num_samples < 1 or max_concurrent < 1 or cpus_per_trial <= 0:
        raise ValueError(f"num_samples={num_samples}, max_concurrent={max_concurrent} must be "
                         f">= 1 and cpus_per_trial={cpus_per_trial} > 0")
    root = os.path.abspath(root)
    if os.path.isdir(root) and os.listdir(root):
        raise ValueError(f"{root} exists and is not empty: give a new --root")
    check_args(train_args, parsed)
    ray, _ = import_ray_tune()
    os.makedirs(os.path.join(root, "trials"), exist_ok=True)
    started = not ray.is_initialized()
    if started:
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": child_env()["PYTHONPATH"]}})
    try:
        return _fit(train_args, parsed, root, num_samples, max_concurrent, cpus_per_trial)
    finally:
        if started:  # ours: stop its processes (a local Ray leaves a dozen behind)
            ray.shutdown()


def _fit(train_args, parsed, root, num_samples, max_concurrent, cpus_per_trial) -> dict:
    """Tune's run of the trials, then the summary (Ray is up)."""
    from ray import tune  # noqa: PLC0415  (optional dependency: the [tune] extra)

    trainable = tune.with_resources(
        tune.with_parameters(_trainable, train_args=list(train_args), root=root),
        {"cpu": cpus_per_trial})
    tuner = tune.Tuner(trainable, param_space=search_space(parsed),
                       tune_config=tune.TuneConfig(num_samples=num_samples,
                                                   max_concurrent_trials=max_concurrent),
                       run_config=tune.RunConfig(name="tune", storage_path=root, verbose=0))
    tuner.fit()
    return write_summary(root)


def write_summary(root: str) -> dict:
    """Collect ``ROOT/trials/*.json`` into ``summary.json`` and ``summary.md``."""
    trials = []
    folder = os.path.join(root, "trials")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                trials.append(json.load(f))
    trials.sort(key=lambda t: -math.inf if t["final_return"] is None else t["final_return"],
                reverse=True)
    summary = {"root": root, "trials": trials}
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(root, "summary.md"), "w") as f:
        f.write(format_table(summary) + "\n")
    return summary


def format_table(summary: dict) -> str:
    """A Markdown table of the trials, best final return first."""
    names = sorted({k for t in summary["trials"] for k in t["config"]})

    def fmt(x):
        return "n/a" if x is None else f"{x:,.1f}" if isinstance(x, float) else f"{x:,}" \
            if isinstance(x, int) else str(x)

    def value(x):  # a searched value: as precise as it was drawn (1e-3 is not "0.0")
        return f"{x:.4g}" if isinstance(x, float) else fmt(x)

    rows = ["| trial | " + " | ".join(names) + " | rc | final return | best return | env steps "
            "| wall s | run folder |",
            "|" + "---|" * (len(names) + 7)]
    for t in summary["trials"]:
        rows.append(f"| {t['trial']} | " + " | ".join(value(t["config"].get(n)) for n in names)
                    + f" | {t['rc']} | {fmt(t['final_return'])} | {fmt(t['best_return'])} | "
                    f"{fmt(t['env_steps'])} | {fmt(t['wall_s'])} | {os.path.relpath(t['logdir'], summary['root'])} |")
    return "\n".join(rows)
