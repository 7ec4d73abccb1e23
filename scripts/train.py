"""Train an agent: ``python scripts/train.py --agent=ppo --env=CartPole-v1 [--flag=value ...]``.

Every field of the run config and of the agent's config is a flag (``--help`` lists
them); defaults come from ``configs/<env>.toml`` and ``--config`` files. Your own agents
and environments are ``--agent=package.module:AGENT`` and ``--env=module:EnvId`` (or
``module:factory``), imported from ``PYTHONPATH`` or the current directory. Exit code 0
on success, 1 when a component died (the message names it), 2 for a bad config or run
folder, 130 on Ctrl-C.
"""

from __future__ import annotations

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, os.getcwd())  # --agent/--env module:NAME in this directory, as python -m finds it

from jaxsrl.experiment.config import load_config  # noqa: E402


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("absl").setLevel(logging.WARNING)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    try:
        cfg = load_config(sys.argv[1:])
    except ValueError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    import gymnasium  # noqa: PLC0415
    from jaxsrl.launch.launcher import ComponentDied, train  # noqa: PLC0415  (imports JAX)
    if cfg.launcher == "ray":
        try:
            from jaxsrl.launch.ray_placement import train_on_ray as train  # noqa: PLC0415
        except ImportError as exc:
            print(f"train.py: error: {exc}", file=sys.stderr)
            return 2
    log = logging.getLogger("jaxsrl")
    try:
        record = train(cfg)
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
    from jaxsrl.experiment.metrics import return_text, returns_of  # noqa: PLC0415
    print(f"done: {record.get('env_steps')} env steps, last {return_text(returns_of(record))}, "
          f"logs in {record['logdir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
