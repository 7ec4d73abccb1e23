"""Several seeds of one training command: ``python scripts/seeds.py --root DIR --seeds 0 1 2 -- TRAIN_ARGS``.

Each seed trains in ``DIR/seed_<s>`` (``python -m jaxsrl.cli.train TRAIN_ARGS --seed=s``), is then
evaluated deterministically, and ``DIR/summary.json`` plus a printed table give each
seed's returns, the first env step and time from launch at which the training return
reached ``--threshold``, and the medians. See ``jaxsrl/tools/multiseed.py``.
"""

from __future__ import annotations

import argparse
import sys

from jaxsrl.tools import multiseed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="parent folder of the seed_<s> run folders")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--threshold", type=float, default=None,
                   help="report when the training return first reached this")
    p.add_argument("--eval_episodes", type=int, default=10,
                   help="deterministic evaluation episodes per seed (0: none)")
    p.add_argument("--ray_cpus", type=float, default=0.0,
                   help="> 0: run seeds as Ray tasks of this many CPUs (default: in sequence)")
    args = p.parse_args(own)
    try:
        summary = multiseed.run_seeds(train_args, args.seeds, args.root, args.threshold,
                                      args.eval_episodes, args.ray_cpus)
    except (ValueError, ImportError) as exc:
        print(f"seeds.py: error: {exc}", file=sys.stderr)
        return 2
    print(multiseed.format_table(summary))
    return 0 if all(s["train_rc"] == 0 for s in summary["per_seed"]) else 1


if __name__ == "__main__":
    sys.exit(main())
