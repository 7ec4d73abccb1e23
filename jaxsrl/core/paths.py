"""Where the checkout is: the one place that knows the package's position in the repo."""

from __future__ import annotations

import os

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""``.../jaxsrl``."""
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
"""The checkout holding ``jaxsrl/``, ``agents/``, ``configs/`` (child processes run here)."""
CONFIG_DIR = os.path.join(REPO_ROOT, "configs")
"""The shipped configs (``configs/<env>.toml``)."""


def child_env(extra: dict | None = None) -> dict[str, str]:
    """The environment of a child process this one starts: this process's environment,
    this checkout first on ``PYTHONPATH`` (the child imports the same jaxsrl, wherever
    it starts: a Ray task's directory too), ``PYTHONUNBUFFERED=1`` unless set, then
    ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env
