"""The inline actor (``--inline_inference``): an actor process that runs the policy itself."""
