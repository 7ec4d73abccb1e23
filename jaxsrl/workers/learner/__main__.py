"""``python -m jaxsrl.workers.learner SPEC_JSON``: one learner process."""

from jaxsrl.workers.learner.process import main

main()
