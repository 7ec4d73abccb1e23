"""The benchmark ladder: ``python scripts/bench.py [--quick] [--env=CartPole-v1] [train flags]``.

The same as ``jaxsrl-bench`` (``--help`` lists the flags); the command line is
:mod:`jaxsrl.cli.bench`. Needs jaxsrl importable: ``pip install -e .`` in this checkout.
"""

import sys

from jaxsrl.cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
