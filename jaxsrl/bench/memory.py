"""Peak resident memory per process kind, by sampling a process tree in a thread.

Uses ``psutil`` when installed, else Linux ``/proc``. A process's kind comes from its
command line: ``actor`` for ``jaxsrl.workers.actor.worker`` processes, ``inline_actor``
for ``jaxsrl.workers.inline`` ones (``--inline_inference``: they import JAX), ``raw_env`` for the
benchmark's environment processes, otherwise the name given for the root process
(e.g. ``accelerator``). On Linux the peak is the kernel's own high-water mark
(``VmHWM`` in ``/proc/<pid>/status``), read every ``interval_s``; the last reading of a
process wins, so a reading taken while a freshly forked child still shared its
parent's memory (before ``exec``) is replaced by the real one. Elsewhere the peak is
the largest RSS seen by sampling.
"""

from __future__ import annotations

import os
import threading

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is a dependency; /proc if it is absent anyway
    psutil = None

MIB = 2**20


def kind_of(cmdline: list[str], root_kind: str) -> str:
    """The process kind of a command line (see module docstring)."""
    text = " ".join(cmdline)
    if "jaxsrl.workers.actor" in text:
        return "actor"
    if "jaxsrl.workers.inline" in text:
        return "inline_actor"
    if "jaxsrl.bench.raw_env" in text:
        return "raw_env"
    if "jaxsrl.bench.transport" in text:
        return "echo_server"
    return root_kind


def _hwm_bytes(pid: int) -> int | None:
    """Peak RSS of ``pid``'s current memory image (Linux ``VmHWM``), or ``None``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _proc_tree(pid: int) -> list[tuple[int, list[str], int]]:
    """``(pid, cmdline, rss_bytes)`` of ``pid`` and its descendants."""
    out = []
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return out
        for p in procs:
            try:
                out.append((p.pid, p.cmdline(), p.memory_info().rss))
            except psutil.Error:
                continue
        return out
    todo = [pid]
    while todo:  # Linux /proc fallback
        p = todo.pop()
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = [c.decode(errors="replace") for c in f.read().split(b"\0") if c]
            with open(f"/proc/{p}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
        out.append((p, cmd, rss))
    return out


class MemorySampler:
    """Samples the RSS of ``pid`` (default: this process) and its descendants.

    Use as a context manager; afterwards :meth:`peaks` gives MiB per kind.
    """

    def __init__(self, pid: int | None = None, root_kind: str = "accelerator",
                 interval_s: float = 0.25):
        self.pid = os.getpid() if pid is None else pid
        self.root_kind, self.interval_s = root_kind, interval_s
        self._peak_by_pid: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def sample(self) -> None:
        for pid, cmd, rss in _proc_tree(self.pid):
            name = os.path.basename(cmd[0]) if cmd else "?"
            kind = self.root_kind if pid == self.pid else kind_of(cmd, f"other ({name})")
            hwm = _hwm_bytes(pid)
            if hwm is not None:  # the kernel's peak of this image: the last reading wins
                self._peak_by_pid[pid] = (kind, hwm)
                continue
            prev_kind, best = self._peak_by_pid.get(pid, (kind, 0))
            self._peak_by_pid[pid] = (kind, max(best, rss) if prev_kind == kind else rss)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self) -> dict:
        """``{kind: {"peak_rss_mib": max over processes, "processes": count}}``."""
        out: dict[str, dict] = {}
        for kind, rss in self._peak_by_pid.values():
            entry = out.setdefault(kind, {"peak_rss_mib": 0.0, "processes": 0})
            entry["peak_rss_mib"] = round(max(entry["peak_rss_mib"], rss / MIB), 1)
            entry["processes"] += 1
        return out

