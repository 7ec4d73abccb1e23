"""The persistent XLA compilation cache (``--compilation_cache_dir``), set up in one place
for every process that compiles (the launcher, remote inference servers, learner
processes, the benchmark): a later run of the same config loads its programs instead of
compiling them again."""

from __future__ import annotations

import os

import jax

#: programs that compiled faster than this are not cached (seconds).
MIN_COMPILE_TIME_S = 0.2


def enable_compilation_cache(path: str | None) -> None:
    """Cache compiled XLA programs under ``path`` (``~`` expanded); ``None`` or ``""``
    leaves JAX's settings as they are. Call before the first compilation."""
    if path:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
