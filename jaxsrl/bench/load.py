"""How busy the machine was during a rung, and how much of that was someone else.

On a shared machine every rate is a lower bound; this module says by how much the
other work competed. Over a rung it measures, from ``/proc/stat`` (via psutil), the
CPU-seconds all processes used, and subtracts the benchmark's own CPU-seconds (this
process plus every child it has reaped, ``RUSAGE_SELF`` + ``RUSAGE_CHILDREN``; every
rung reaps its children before it returns). The rest, divided by the wall time, is
``other_cores``: the average number of cores other work kept busy.
"""

from __future__ import annotations

import resource
import time

from jaxsrl.bench.machine import load_average

try:
    import psutil
except ImportError:  # pragma: no cover
    psutil = None


def _busy_cpu_s() -> float | None:
    if psutil is None:
        return None
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_cpu_s() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


class LoadMeter:
    """``start()`` then ``stop()`` -> ``{"load_average_1m", "own_cores", "other_cores"}``."""

    def start(self) -> "LoadMeter":
        self._t, self._busy, self._own = time.monotonic(), _busy_cpu_s(), _own_cpu_s()
        return self

    def stop(self) -> dict:
        wall = max(time.monotonic() - self._t, 1e-9)
        busy, own = _busy_cpu_s(), _own_cpu_s() - self._own
        out = {"load_average_1m": (load_average() or [None])[0], "own_cores": round(own / wall, 2)}
        if busy is not None and self._busy is not None:
            out["other_cores"] = round(max(0.0, (busy - self._busy) - own) / wall, 2)
        return out
