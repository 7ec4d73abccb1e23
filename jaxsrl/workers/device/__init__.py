"""Device actors (Podracer's Anakin): JAX-native environments stepped next to the
policy on the accelerator, in one compiled function with the agent's ``act`` (and, for
on-policy agents, its ``learn``). ``rollout.py`` builds the segments, ``fused.py`` the
rollout-and-learn step, ``offpolicy.py`` / ``offpolicy_steps.py`` the off-policy step and
its host side, ``finite.py`` the in-step non-finite guard; ``trainer.py`` and
``population_trainer.py`` are the learners the launcher's one control loop drives
(built by :mod:`jaxsrl.launch.device_trainers`)."""
