"""``python -m jaxsrl.workers.buffer SPEC_JSON``: one buffer (replay) process."""

import sys

from jaxsrl.workers.buffer.server import main

sys.exit(main())
