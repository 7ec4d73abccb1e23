"""Device actors (Podracer's Anakin): JAX-native environments stepped next to the
policy on the accelerator, in one compiled function with the agent's ``act`` (and, for
on-policy agents, its ``learn``). ``rollout.py`` builds the segments, ``fused.py`` the
rollout-and-learn step; the run loop is :mod:`jaxsrl.launch.device_actors`."""
