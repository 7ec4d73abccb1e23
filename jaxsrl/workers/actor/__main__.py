"""``python -m jaxsrl.workers.actor SPEC_JSON``: one actor process."""

import sys

from jaxsrl.workers.actor.process import main

sys.exit(main())
