"""The benchmark ladder: ``python scripts/bench.py [--quick] [--env=CartPole-v1] [train flags]``.

Measures raw environment speed, transport, inference, learner, end-to-end training and
its scaling with the number of actor processes on this machine, plus peak memory per
process kind; prints a table and writes ``docs/benchmarks.json`` and
``docs/benchmarks.md`` (see ``--help`` and ``jaxsrl/bench/``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxsrl.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
