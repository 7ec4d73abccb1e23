"""The inference (policy) worker: batches actors' observations and answers with actions."""
