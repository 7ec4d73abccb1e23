"""Train an agent: ``jaxsrl-train --agent=ppo --env=CartPole-v1 [--flag=value ...]``.

The same command is ``python scripts/train.py ...`` or ``python -m jaxsrl.cli.train ...``.
Every field of the run config and of the agent's config is a flag (``--help`` lists
them); defaults come from ``configs/<env>.toml`` and ``--config`` files. Your own agents
and environments are ``--agent=package.module:AGENT`` and ``--env=module:EnvId`` (or
``module:factory``), imported from ``PYTHONPATH`` or the current directory. Exit code 0
on success, 1 when a component died (the message names it), 2 for a bad config or run
folder, 130 on Ctrl-C.
"""

from __future__ import annotations

import logging
import sys
from typing import Sequence

import gymnasium

from jaxsrl.cli.common import configure_logging, import_from_current_directory
from jaxsrl.experiment.config import load_config
from jaxsrl.experiment.metrics import return_text, returns_of
from jaxsrl.launch.launcher import ComponentDied, train

log = logging.getLogger("jaxsrl")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, train, print one ``done:`` line; returns the exit code.

    Args:
      argv: the flags (default ``sys.argv[1:]``).
    """
    import_from_current_directory()
    configure_logging()
    try:
        cfg = load_config(list(sys.argv[1:] if argv is None else argv))
    except ValueError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
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
