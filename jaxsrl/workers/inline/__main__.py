"""``python -m jaxsrl.workers.inline SPEC_JSON``: one inline actor process."""

import sys

from jaxsrl.workers.inline.worker import main

sys.exit(main())
