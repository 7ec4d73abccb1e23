"""Plot learning curves: ``jaxsrl-plot LOGDIR [LOGDIR ...] [--out curves.png]``.

Reads each run's ``metrics.jsonl`` and writes PNGs (default: ``curves.png`` in the
first run's folder; the paths written are printed): episode return against
environment steps and against wall-clock time, per-team returns for multi-agent runs,
the periodic evaluation's return (``eval/return_mean``, from ``--eval_every``) against
environment steps when the run has one, and (for runs with episode statistics, e.g. hide-and-seek phases) a second figure
``<out>_episode.png``. Each run is its own curve, labelled by its folder; ``--band``
averages the runs of each agent (or of each ``--labels`` label; repeated labels
average too). The same command is ``python scripts/plot.py ...`` or
``python -m jaxsrl.cli.plot ...``::

    python scripts/plot.py runs/ppo runs/impala                 # two curves, runs/ppo/curves.png
    python scripts/plot.py runs/ppo-s0 runs/ppo-s1 --band mean --out seeds.png   # one: mean, std
    python scripts/plot.py runs/hs --out hs.png --stats 'episode/*locked*' --keys loss/total
    python scripts/plot.py runs/a runs/b --labels lr1e-3 lr3e-4 --smooth 0.6
    python scripts/plot.py runs/cp --keys 'eval/*'          # every periodic-evaluation metric

Exit code 0 on success, 2 for a missing metrics file, a ``--keys`` pattern that matches
no metric, or a bad option.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from jaxsrl.tools import plotting  # no JAX


def parser() -> argparse.ArgumentParser:
    """The command line's flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logdirs", nargs="+", help="run folders with metrics.jsonl")
    p.add_argument("--out", default=None,
                   help="PNG of the returns (default: curves.png in the first run's folder)")
    p.add_argument("--labels", nargs="+", default=None,
                   help="one label per run (default: the folder's name; with --band, the agent "
                        "name); runs with the same label are averaged")
    p.add_argument("--smooth", type=float, default=0.0, help="EMA weight in [0, 1) (default 0)")
    p.add_argument("--keys", nargs="+", default=[],
                   help="extra metric keys to plot against env steps, or shell patterns of them "
                        "(e.g. loss/total staleness_mean fps 'eval/*')")
    p.add_argument("--stats", nargs="+", default=None,
                   help="shell patterns of the episode/... statistics to plot (default: all)")
    p.add_argument("--no_stats", action="store_true", help="skip the episode-statistics figure")
    p.add_argument("--reference", action="append", default=[], metavar="STEPS:RETURN:LABEL",
                   help="a published result drawn as a marker on the return panel, e.g. "
                        "'1e6:1867:CleanRL PPO (HF model card)'; repeatable")
    p.add_argument("--reference_time", action="append", default=[], metavar="SECONDS:RETURN:LABEL",
                   help="a published result drawn on the return-vs-wall-clock panel (seconds "
                        "from launch); repeatable")
    p.add_argument("--band", choices=plotting.BANDS, default=None,
                   help="average the runs of each agent (or label): mean +- std, or median and "
                        "min-max (default: each run its own curve)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Write the figures and print their paths; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        references = [plotting.parse_reference(r) for r in args.reference]
        time_references = [plotting.parse_reference(r) for r in args.reference_time]
        paths = plotting.plot_runs(args.logdirs, args.out, labels=args.labels,
                                   smoothing=args.smooth, keys=args.keys, stats=args.stats,
                                   episode_stats=not args.no_stats, references=references,
                                   time_references=time_references, band=args.band)
    except (FileNotFoundError, ValueError) as exc:
        print(f"plot.py: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
