"""Evaluate a trained policy: ``jaxsrl-evaluate --logdir LOGDIR [options]``.

Loads the newest checkpoint of a run (or ``--checkpoint LOGDIR/checkpoints/<policy>[/<step>]``),
rebuilds the agent from ``LOGDIR/config.json``, runs ``--episodes`` episodes in this
process and prints the mean and std of the return (per team for team games such as
hide-and-seek); the
same command is ``python scripts/evaluate.py ...`` or ``python -m jaxsrl.cli.evaluate ...``::

    python scripts/evaluate.py --logdir runs/cp --episodes 20
    python scripts/evaluate.py --logdir runs/cp --video cp.mp4       # every episode; or cp.gif
    python scripts/evaluate.py --checkpoint runs/cp/checkpoints/default/120 --sample

A device-actor run (a JAX-native ``--env`` such as ``gymnax:CartPole-v1``) is evaluated
on that env, its episodes under one compiled loop; its videos are drawn by gymnax's
Visualizer (gymnax ids only; other envs say in one line that they cannot record one).
Actions are the policy's most likely ones unless ``--sample``. The env is built as in
training; only ``--video`` asks it for ``rgb_array`` frames (an env that cannot draw
them is an error naming it). MP4 needs the ``imageio-ffmpeg`` package (without it a
GIF is written instead). Exit code 0 on success, 2 for a missing run/checkpoint, an
env that cannot render a ``--video``, or a bad option; a run keeps only its newest
``--keep_checkpoints`` steps, and asking for an older one says which it keeps. It writes
nothing but the ``--video`` and ``--json`` files asked for.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

import gymnasium

from jaxsrl.cli.common import configure_logging, import_from_current_directory
from jaxsrl.core import interrupts
from jaxsrl.tools import evaluation


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags (default ``sys.argv[1:]``); ``SystemExit(2)`` with usage for bad ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--logdir", help="run folder (config.json, checkpoints/)")
    src.add_argument("--checkpoint", help="LOGDIR/checkpoints/<policy> (newest) or .../<policy>/<step>")
    p.add_argument("--config", default=None, help="config.json to use instead of the run's")
    p.add_argument("--policy", default=None,
                   help="use this policy for every agent (default: the run's team mapping)")
    p.add_argument("--episodes", type=int, default=10, help="episodes to run (default 10)")
    p.add_argument("--sample", action="store_true",
                   help="sample actions as in training (default: deterministic, most likely action)")
    p.add_argument("--seed", type=int, default=0, help="episode i resets the env with seed + i (JAX-native envs: key PRNGKey(seed))")
    p.add_argument("--max_steps", type=int, default=None, help="cut episodes after this many steps")
    p.add_argument("--video", default=None,
                   help="write a video of the evaluated episodes, one after the other (.mp4 or .gif)")
    p.add_argument("--video_episode", type=int, default=None,
                   help="record only this episode, 0-based (default: every episode)")
    p.add_argument("--video_every", type=int, default=1, help="keep every n-th frame")
    p.add_argument("--video_fps", type=float, default=None,
                   help="frames per second (default: the env's render_fps / video_every)")
    p.add_argument("--json", default=None, help="also write the summary and episodes as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Evaluate, print the summary (and write ``--json``); returns the exit code (0; 2 a
    bad flag or run folder; 130 interrupted by SIGINT or SIGTERM, nothing written)."""
    args = parse_args(argv)
    import_from_current_directory()
    configure_logging(absl_level=logging.ERROR)
    if args.episodes < 1 or args.video_every < 1:
        print("evaluate.py: error: --episodes and --video_every must be >= 1", file=sys.stderr)
        return 2
    if args.video_episode is not None and not 0 <= args.video_episode < args.episodes:
        print("evaluate.py: error: --video_episode must be in [0, --episodes)", file=sys.stderr)
        return 2
    previous = interrupts.install_stop_handlers()  # Ctrl-C between compiled calls is not lost
    try:
        run = evaluation.load_run(logdir=args.logdir, checkpoint=args.checkpoint,
                                  config_path=args.config, policy=args.policy)
        result = evaluation.evaluate(
            run, episodes=args.episodes, deterministic=not args.sample, seed=args.seed,
            video=args.video, video_episode=args.video_episode, video_every=args.video_every,
            video_fps=args.video_fps, max_steps=args.max_steps)
    except (FileNotFoundError, ValueError, KeyError,
            gymnasium.error.DependencyNotInstalled) as exc:  # e.g. pygame for CartPole frames
        print(f"evaluate.py: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: nothing was written
        print("evaluate.py: interrupted", file=sys.stderr)
        return 130
    finally:
        interrupts.restore(previous)
    summary = result.summary()
    print(evaluation.format_summary(run, summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "episodes": result.episodes,
                       "checkpoints": {k: v.path for k, v in run.policies.items()}}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
