"""``jaxsrl-sweep`` / ``python scripts/sweep.py``: independent runs on Ray Tune.

    python scripts/sweep.py --root runs/lr_sweep --num_samples 8 --max_concurrent 2 \\
        --axis 'ppo.learning_rate=loguniform(1e-5,1e-2)' -- --env=CartPole-v1 --total_env_steps=200000

Flags before ``--`` are the sweep's; those after it are the train command's, shared by
every trial. See :mod:`jaxsrl.tools.sweep` for the axes and the summary it writes.
"""

from __future__ import annotations

import argparse
import sys

from jaxsrl.cli.common import configure_logging, import_from_current_directory
from jaxsrl.tools import sweep


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    train_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="sweep.py", description=__doc__.split("\n\n")[0],
                                epilog="Axes: NAME=uniform(lo,hi) | loguniform(lo,hi) | "
                                       "randint(lo,hi) | choice(v,...) | grid(v,...)")
    p.add_argument("--root", required=True, help="the sweep's folder (new or empty)")
    p.add_argument("--axis", action="append", default=[], metavar="NAME=KIND(ARGS)",
                   help="one searched train flag (repeat for several)")
    p.add_argument("--num_samples", type=int, default=1,
                   help="Tune samples (each grid point is repeated this often)")
    p.add_argument("--max_concurrent", type=int, default=1, help="trials running at once")
    p.add_argument("--cpus_per_trial", type=float, default=2.0,
                   help="CPUs Ray reserves for each trial")
    p.add_argument("--ray_address", default=None, help="a running Ray cluster (default: local)")
    args = p.parse_args(own)
    configure_logging()
    import_from_current_directory()
    try:
        summary = sweep.run_sweep(train_args, args.axis, args.root, args.num_samples,
                                  args.max_concurrent, args.cpus_per_trial, args.ray_address)
    except (ValueError, ImportError) as exc:
        print(f"sweep.py: error: {exc}", file=sys.stderr)
        return 2
    print(sweep.format_table(summary))
    return 0 if all(t["rc"] == 0 for t in summary["trials"]) else 1


if __name__ == "__main__":
    sys.exit(main())
