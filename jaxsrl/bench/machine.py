"""Describe the machine a benchmark ran on (cores, memory, devices, versions, load)."""

from __future__ import annotations

import datetime
import os
import platform
import sys

import jax


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float]:
    """``os.getloadavg()`` rounded (1, 5, 15 minutes); empty where unsupported."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def describe(command: str) -> dict:
    """Plain-data description of this machine and the benchmark ``command``.

    Initialises JAX's backend (to list ``jax.devices()``): call it from the benchmark
    process only.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "cpu": _cpu_model(),
        "memory_gib": _memory_gib(),
        "devices": [str(d) for d in jax.devices()],
        "platform": jax.default_backend(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_start": load_average(),
        "command": command,
        "executable": sys.executable,
    }
