"""The learner (trainer) worker: turns trajectory segments into new parameters."""
