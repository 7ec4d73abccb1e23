"""Start and stop the benchmark's own child processes (``python -m <module> '<json>'``).

Children get the repository on ``PYTHONPATH`` (like ``jaxsrl.launch.processes.ChildProcess``)
and pipes for a one-line handshake on stdin/stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys

from jaxsrl.core.paths import child_env


def start_module(module: str, payload: dict, pipes: bool = True, **popen) -> subprocess.Popen:
    """Start ``python -m module '<json payload>'``; stdin/stdout are text pipes if ``pipes``."""
    if pipes:
        popen.update(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    return subprocess.Popen([sys.executable, "-m", module, json.dumps(payload)],
                            env=child_env(), **popen)


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
    return proc.returncode


def read_json_line(proc: subprocess.Popen, what: str) -> dict:
    """The next stdout line of ``proc`` as JSON; ``RuntimeError`` if it exited instead."""
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        raise RuntimeError(f"{what} exited with code {code} before answering")
    return json.loads(line)
