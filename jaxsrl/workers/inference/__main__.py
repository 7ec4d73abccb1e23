"""``python -m jaxsrl.workers.inference SPEC_JSON``: one inference process."""

import sys

from jaxsrl.workers.inference.server import main

sys.exit(main())
