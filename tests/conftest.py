"""Every process the tests start imports this checkout, whatever else is installed.

``pythonpath = ["."]`` (pyproject.toml) does that for the test process; the commands
the tests run (``python scripts/train.py``, ``python -m jaxsrl.workers.actor``, ...) get
it from ``PYTHONPATH``, as the launcher's child processes do
(``jaxsrl.core.paths.child_env``). Without it they would import whatever jaxsrl
is installed (``pip install -e .`` of another checkout), or none.
"""

import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
TIERS = ("unit", "workers", "system")
"""``tests/unit`` (maths, wire, messages, config, dataflow, envs), ``tests/workers`` (each
worker against fakes, through its public methods), ``tests/system`` (end to end, faults,
resume, multi-host, Ray). Shared helpers stay in ``tests/``; every tier imports them and
each other's fixtures by module name."""

for _d in (TESTS, *(os.path.join(TESTS, t) for t in TIERS)):
    if _d not in sys.path:
        sys.path.insert(0, _d)

os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

# The suite does not depend on the caller's display switches: a JAXSRL_PROGRESS=0 left in
# the environment (e.g. by a script that ran a job first) would turn off the progress bar
# that tests/unit/test_numbers.py and test_plot.py draw. Tests that want it set it.
os.environ.pop("JAXSRL_PROGRESS", None)
