"""Workers of the dataflow: actor (CPU process), inference (policy worker and server), learner (trainer and its process), buffer (replay)."""
