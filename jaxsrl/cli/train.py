"""Train an agent: ``jaxsrl-train --agent=ppo --env=CartPole-v1 [--flag=value ...]``.

The same command is ``python scripts/train.py ...`` or ``python -m jaxsrl.cli.train ...``.
Every field of the run config and of the agent's config is a flag (``--help`` lists
them in groups, with the values the other flags resolve to; a boolean is ``--x`` /
``--no_x`` or ``--x=true`` / ``--x=false``); defaults come from ``configs/<env>.toml``
and ``--config`` files. Your own agents and environments are
``--agent=package.module:AGENT`` and ``--env=module:EnvId`` (or ``module:factory``),
imported from ``PYTHONPATH`` or the current directory. Exit code 0 on success, 1 when a
component died (the message names it), 2 for a bad config or run folder, 130 on Ctrl-C.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Sequence

import gymnasium

from agents import AGENTS
from jaxsrl.cli import help as help_lib
from jaxsrl.cli.common import configure_logging, import_from_current_directory
from jaxsrl.core.limits import raise_fd_limit
from jaxsrl.experiment.checkpoint import CheckpointWriteError
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import return_text, returns_of
from jaxsrl.launch.launcher import ComponentDied, train

log = logging.getLogger("jaxsrl")


def parse(args: Sequence[str]) -> Any:
    """The validated run config of the flags ``args`` (no ``--help``).

    A boolean flag may carry a value, ``--x=false`` / ``--ppo.anneal_lr=true``
    (:mod:`jaxsrl.experiment.switches`, applied by ``load_config``), besides ``--x`` /
    ``--no_x``.

    Raises:
      ValueError: as :func:`jaxsrl.experiment.config.load_config` (a boolean flag with a
        value other than true/false/1/0 included).
      SystemExit: flags tyro cannot parse (it prints why).
    """
    return load_config(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, train, print one ``done:`` line; returns the exit code.

    With ``-h`` / ``--help`` anywhere, prints the flags (:mod:`jaxsrl.cli.help`) with the
    values the other flags resolve to, and returns 0 without training.

    Args:
      argv: the flags (default ``sys.argv[1:]``).
    """
    import_from_current_directory()
    configure_logging()
    raise_fd_limit()  # local inference servers and the learner hold a connection per actor
    args = list(sys.argv[1:] if argv is None else argv)
    wants_help = "-h" in args or "--help" in args
    args = [a for a in args if a not in ("-h", "--help")]
    try:
        cfg = parse(args)
    except ValueError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    if wants_help:
        sys.stdout.write(help_lib.render(cfg, args, list(AGENTS)))
        return 0
    run = train
    if cfg.launcher == "ray":
        try:
            # Optional dependency: Ray is imported only for --launcher=ray.
            from jaxsrl.launch.ray_placement import train_on_ray as run  # noqa: PLC0415
        except ImportError as exc:
            print(f"train.py: error: {exc}", file=sys.stderr)
            return 2
    try:
        record = run(cfg)
    except ComponentDied as exc:
        log.error("run stopped: %s", exc)
        return 1
    except KeyboardInterrupt:
        log.warning("interrupted (the line above says which checkpoints were saved)")
        return 130
    except CheckpointWriteError as exc:  # a full disk: not a configuration error
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, FileNotFoundError, gymnasium.error.Error) as exc:
        # Problems found before training starts: unsupported spaces, a missing
        # dependency of the environment, --resume without a checkpoint, device counts.
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"done: {record.get('env_steps')} env steps, last {return_text(returns_of(record))}, "
          f"logs in {record['logdir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
