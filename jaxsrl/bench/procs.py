"""The bench's child processes (``python -m <module> '<json>'``), started by the launcher's
starter (:class:`jaxsrl.launch.processes.ChildProcess` with
:func:`~jaxsrl.launch.processes.local_spawner`), with pipes for a one-line JSON handshake.

A child gets its spec plus a ``run_id`` (the launcher's restart key; bench children
ignore it) and runs in its own session: it watches its parent's pid to end with it.
"""

from __future__ import annotations

import functools
import json
import subprocess

from jaxsrl.launch.processes import ChildProcess, local_spawner, stop_all


def start_module(module: str, payload: dict, pipes: bool = True, **popen) -> subprocess.Popen:
    """Start ``python -m module '<json payload>'``; returns its ``Popen`` (stdin/stdout
    text pipes if ``pipes``; ``popen``: more ``Popen`` arguments, e.g. ``stdout=<file>``)."""
    if pipes:
        popen.update(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    child = ChildProcess(module, payload, module=module,
                         spawner=functools.partial(local_spawner, **popen))
    child.start()
    return child.proc


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace_s`` (:func:`~jaxsrl.launch.processes.stop_all`),
    close its pipes; returns the exit code."""
    stop_all([ChildProcess("bench child", {}, proc=proc)], grace_s)
    proc.wait()
    _close_pipes(proc)
    return proc.returncode


def _close_pipes(proc: subprocess.Popen) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def end_clients(procs: list, wait_s: float) -> None:
    """End bench client processes: tell each one still running to ``stop`` (a line on its
    stdin), wait up to ``wait_s`` seconds for each, kill any left, close every pipe."""
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.stdin.write("stop\n")
                proc.stdin.flush()
            except OSError:  # it is exiting already
                pass
    for proc in procs:
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _close_pipes(proc)


def ask(proc: subprocess.Popen, line: str | None = None, *, what: str) -> dict:
    """Send ``line`` (if any) to a bench client process's stdin and return its next stdout
    line as JSON.

    Raises:
      RuntimeError: the process (``what``) exited instead, with the end of its stderr.
    """
    if line is not None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
    answer = proc.stdout.readline()
    if not answer:
        proc.wait(10)
        raise RuntimeError(f"{what} exited with code {proc.returncode}: "
                           f"{proc.stderr.read().strip()[-500:]}")
    return json.loads(answer)


def read_json_line(proc: subprocess.Popen, what: str) -> dict:
    """The next stdout line of ``proc`` as JSON; ``RuntimeError`` if it exited instead."""
    line = proc.stdout.readline()
    if not line:
        code = proc.wait()
        raise RuntimeError(f"{what} exited with code {code} before answering")
    return json.loads(line)
