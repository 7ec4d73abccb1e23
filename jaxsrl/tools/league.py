"""A self-play run's league: its ratings table and its pools over time.

* :func:`league_table` reads ``LOGDIR/selfplay/league.json`` (written by the run at each
  save of its pools, ``jaxsrl/workers/population/league_store.py``) and returns it as
  Markdown: ``python -m jaxsrl.tools.league LOGDIR`` prints it;
* :func:`selfplay_figure` draws, from ``metrics.jsonl``, each policy's pool size and the
  rating ordinals (``mu - 3 sigma``) of its latest policy against environment steps
  (``scripts/plot.py`` adds it as ``<out>_selfplay.png`` for runs that have them).

No JAX here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Sequence

from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.population.league_table import markdown

PREFIX = "selfplay/"


def league_rows(logdir: str) -> list[dict]:
    """The rows of ``LOGDIR/selfplay/league.json``, highest ordinal first.

    Raises:
      FileNotFoundError: the run saved no league (not a self-play run, or it stopped
        before its first save).
    """
    path = os.path.join(RunDir(logdir).selfplay_path, "league.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no league table {path} (a run with [opponents] writes it)")
    with open(path) as f:
        return json.load(f)


def league_table(logdir: str) -> str:
    """The league of ``logdir`` as a Markdown table (see :func:`league_rows`)."""
    return markdown(league_rows(logdir))


def selfplay_policies(runs: list) -> list[str]:
    """Policies with ``selfplay/pool_size/<policy>`` in any of ``runs`` (``plotting`` runs)."""
    keys = set().union(*(run.keys() for run in runs)) if runs else set()
    return sorted(k.rsplit("/", 1)[1] for k in keys if k.startswith(PREFIX + "pool_size/"))


def selfplay_figure(runs: list, path: str) -> str:
    """Pool size and latest rating per policy against environment steps; returns ``path``."""
    from matplotlib.figure import Figure  # noqa: PLC0415
    policies = selfplay_policies(runs)
    fig = Figure(figsize=(9.2, 3.3), layout="constrained")
    sizes, ratings = fig.subplots(1, 2)
    for run in runs:
        for p in policies:
            label = p if len(runs) == 1 else f"{run.label} {p}"
            xs, ys = run.series(f"{PREFIX}pool_size/{p}")
            sizes.plot(xs, ys, lw=1.2, label=label)
            xs, ys = run.series(f"{PREFIX}rating/{p}/latest")
            ratings.plot(xs, ys, lw=1.2, label=label)
    for ax, title in ((sizes, "snapshots in the pool"),
                      (ratings, "rating of the latest policy (mu - 3 sigma)")):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jaxsrl.tools.league LOGDIR``: print the league table; exit 2 if none."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m jaxsrl.tools.league LOGDIR", file=sys.stderr)
        return 2
    try:
        print(league_table(args[0]), end="")
    except FileNotFoundError as exc:
        print(f"league: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
