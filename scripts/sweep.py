"""Independent runs on Ray Tune: ``python scripts/sweep.py --root DIR --axis 'NAME=KIND(ARGS)' -- TRAIN_ARGS``.

The same as ``jaxsrl-sweep`` (``--help`` lists the flags); the command line is
:mod:`jaxsrl.cli.sweep`. Needs jaxsrl importable (``pip install -e .``) and Ray Tune
(``pip install -e '.[tune]'``).
"""

import sys

from jaxsrl.cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
