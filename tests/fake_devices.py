"""The environment of a subprocess that sees ``n`` fake CPU devices.

JAX fixes its device count when it starts, so a test comparing a sharded program with a
single-device one runs it in a subprocess started with :func:`fake_devices_env`.
"""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: XLA:CPU's code generation without LLVM's optimisation passes. The programs these
#: subprocesses compare are compiled once and run for milliseconds, so compiling them
#: is their cost, much of it LLVM's optimiser (docs/test_costs.md). Sharding is decided on
#: the HLO before code generation: the partitioned programs compared are the same.
FAST_COMPILE = "--xla_backend_optimization_level=0"


def fake_devices_env(n: int, *paths: str) -> dict[str, str]:
    """``os.environ`` plus ``XLA_FLAGS`` for ``n`` fake CPU devices compiled with
    :data:`FAST_COMPILE` (after any flags the caller set), ``JAX_PLATFORMS=cpu`` and
    ``PYTHONPATH`` = this checkout, then ``paths``, then the caller's."""
    env = dict(os.environ)
    flags = [env.get("XLA_FLAGS", ""), FAST_COMPILE, f"--xla_force_host_platform_device_count={n}"]
    env["XLA_FLAGS"] = " ".join(f for f in flags if f)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO, *paths] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env
