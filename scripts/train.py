"""Train an agent: ``python scripts/train.py --agent=ppo --env=CartPole-v1 [--flag=value ...]``.

The same as ``jaxsrl-train`` (``--help`` lists the flags); the command line is
:mod:`jaxsrl.cli.train`. Needs jaxsrl importable: ``pip install -e .`` in this checkout.
"""

import sys

from jaxsrl.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
