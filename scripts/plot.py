"""Plot learning curves: ``python scripts/plot.py LOGDIR [LOGDIR ...] [--out curves.png]``.

The same as ``jaxsrl-plot`` (``--help`` lists the flags); the command line is
:mod:`jaxsrl.cli.plot`. Needs jaxsrl importable: ``pip install -e .`` in this checkout.
"""

import sys

from jaxsrl.cli.plot import main

if __name__ == "__main__":
    sys.exit(main())
