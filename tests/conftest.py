"""Every process the tests start imports this checkout, whatever else is installed.

``pythonpath = ["."]`` (pyproject.toml) does that for the test process; the commands
the tests run (``python scripts/train.py``, ``python -m jaxsrl.workers.actor``, ...) get
it from ``PYTHONPATH``, as the launcher's child processes do
(``jaxsrl.launch.processes.child_env``). Without it they would import whatever jaxsrl
is installed (``pip install -e .`` of another checkout), or none.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
