"""Where the checkout is: the one place that knows the package's position in the repo."""

import os

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""``.../jaxsrl``."""
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
"""The checkout holding ``jaxsrl/``, ``agents/``, ``configs/`` (child processes run here)."""
CONFIG_DIR = os.path.join(REPO_ROOT, "configs")
"""The shipped configs (``configs/<env>.toml``)."""
