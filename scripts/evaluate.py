"""Evaluate a trained policy: ``python scripts/evaluate.py --logdir LOGDIR [options]``.

The same as ``jaxsrl-evaluate`` (``--help`` lists the flags); the command line is
:mod:`jaxsrl.cli.evaluate`. Needs jaxsrl importable: ``pip install -e .`` in this checkout.
"""

import sys

from jaxsrl.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
