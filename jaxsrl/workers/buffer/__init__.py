"""The replay (buffer) component of off-policy agents.

- :mod:`~jaxsrl.workers.buffer.replay`: :class:`~jaxsrl.workers.buffer.replay.Replay`, a
  uniform or proportional prioritised item buffer on one device over flashbax, and
  :func:`~jaxsrl.workers.buffer.replay.beta_schedule`;
- :mod:`~jaxsrl.workers.buffer.rate_limiter`:
  :class:`~jaxsrl.workers.buffer.rate_limiter.SampleToInsertRatio`, Reverb's replay-ratio
  limiter in pure Python;
- :mod:`~jaxsrl.workers.buffer.stats`: the buffer's metrics as a flat dict of floats;
- :mod:`~jaxsrl.workers.buffer.feed`: :class:`~jaxsrl.workers.buffer.feed.ReplayFeed`,
  the three above joined for one buffer worker (segments in, batches out);
- :mod:`~jaxsrl.workers.buffer.server`, :mod:`~jaxsrl.workers.buffer.spec`,
  :mod:`~jaxsrl.workers.buffer.segments`: the buffer *process* (placement
  ``"process"``), its spec and its admission of segments; ``python -m
  jaxsrl.workers.buffer '<json spec>'`` runs one.

This package imports nothing itself, so the rate limiter can be imported where JAX is
not wanted (e.g. next to actors); import the submodules.
"""
