"""What every command line does first: log format, and user code importable from the
current directory."""

from __future__ import annotations

import logging
import os
import sys

from jaxsrl.core import imports


def configure_logging(absl_level: int = logging.WARNING) -> None:
    """INFO records as ``HH:MM:SS name message`` on stderr; JAX's backend notes silenced.

    Replaces the root logger's handlers (``force``): importing Orbax already gave it
    one (absl's logging calls ``logging.basicConfig()`` when the root has none).

    Args:
      absl_level: level of the ``absl`` logger (Orbax logs through it).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S", force=True)
    logging.getLogger("absl").setLevel(absl_level)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)


def import_from_current_directory() -> None:
    """Let ``--agent=module:NAME`` / ``--env=module:EnvId`` name modules of the current directory.

    ``python -m`` puts the current directory first on ``sys.path``; a console script
    (``jaxsrl-train``) or ``python scripts/train.py`` puts its own folder there instead.
    This adds the current directory right after it, unless it is on ``sys.path`` already,
    so all three find the same user code (child processes, started in the same directory
    with ``python -m``, find it too; see :mod:`jaxsrl.core.imports`).
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(1, cwd)
    shadowed = imports.shadowed_agents_package([cwd])
    if shadowed:  # the workers, started with ``python -m`` here, would import that folder
        print(f"{os.path.basename(sys.argv[0])}: error: {shadowed}", file=sys.stderr)
        sys.exit(2)
