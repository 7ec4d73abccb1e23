"""Workers of the dataflow: actor (CPU process), policy (inference) and trainer (learner)."""
