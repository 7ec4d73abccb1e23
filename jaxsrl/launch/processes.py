"""Child processes of a run (actors, remote inference servers, learner processes).

A :class:`ChildProcess` knows how to start one worker process again (``start`` gives
it a fresh run id) and how to stop it. *Where* it runs is the job of a
:class:`Spawner`: :func:`local_spawner` starts ``python -m <module> '<json spec>'``
as a subprocess of this machine (optionally behind a command prefix such as
``ip netns exec host1``); ``jaxsrl.launch.ray_spawner.RaySpawner`` places the same
command on a Ray cluster; ``jaxsrl.launch.serial.ThreadSpawner`` (``--launcher=serial``)
runs it as a thread of this process. Every spawner returns a ``subprocess.Popen``-like
handle (``pid``, ``returncode``, ``poll()``, ``wait(timeout)``, ``terminate()``, ``kill()``).
"""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import subprocess
import sys
import time
from typing import Any, Protocol, Sequence

from jaxsrl.core.exit_codes import EXIT_ENV_ERROR
from jaxsrl.core.paths import child_env


class Spawner(Protocol):
    """Starts ``argv`` with extra environment variables ``env``; returns a Popen-like handle."""

    def __call__(self, argv: list[str], env: dict[str, str], prefix: Sequence[str] = ()) -> Any: ...


def local_spawner(argv: list[str], env: dict[str, str], prefix: Sequence[str] = (),
                  **popen: Any) -> subprocess.Popen:
    """Start ``prefix + argv`` on this machine, in its own session (``popen``: more
    ``subprocess.Popen`` arguments, e.g. the bench's stdin/stdout pipes).

    Own session: a terminal's Ctrl-C goes to the launcher only, which stops children
    in order; ``PR_SET_PDEATHSIG`` (set by the child) still kills them with the launcher.
    """
    return subprocess.Popen([*prefix, *argv], env=child_env(env), start_new_session=True, **popen)


@dataclasses.dataclass
class ChildProcess:
    """One worker process of the run and how to start it again.

    Attributes:
      name: for logs and errors, e.g. ``actors[3]``.
      spec: JSON-able spec handed to the process as its only argument.
      module: the ``python -m`` module to run (default: the actor worker).
      table: an :class:`~jaxsrl.streams.admission.ActorTable`; ``start`` registers the new
        run id there before the process exists, so servers accept only the new run.
      env: extra environment variables (e.g. a CURVE keypair).
      prefix: command prefix, e.g. ``["ip", "netns", "exec", "host1"]``.
      spawner: where the process runs (default :func:`local_spawner`).
    """

    name: str
    spec: dict
    proc: Any = None
    restarts: int = 0
    table: Any = None
    env: dict | None = None
    started_at: float = 0.0
    module: str = "jaxsrl.workers.actor"
    prefix: Sequence[str] = ()
    spawner: Any = None

    def start(self) -> None:
        self.spec = {**self.spec, "run_id": random.getrandbits(31)}
        if self.table is not None:
            self.table.register(self.spec["actor_id"], self.spec["run_id"])
        self.started_at = time.monotonic()
        spawn = self.spawner or local_spawner
        self.proc = spawn([sys.executable, "-m", self.module, json.dumps(self.spec)],
                          dict(self.env or {}), tuple(self.prefix))

    def stop(self, grace_s: float = 3.0) -> None:
        stop_all([self], grace_s)

    def kill(self) -> None:
        """SIGKILL (works on a stopped or hung process too) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_all(children: list, grace_s: float = 3.0) -> None:
    """SIGTERM every running child at once, then SIGKILL those alive after ``grace_s``."""
    running = [a for a in children if a.proc is not None and a.proc.poll() is None]
    for a in running:
        try:
            a.proc.terminate()
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    for a in running:
        try:
            a.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            a.kill()


def exit_reason(code: int) -> str:
    """Words for a child's exit status (negative: killed by that signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return {EXIT_ENV_ERROR: "its environment raised", 0: "it stopped"}.get(code, f"exit code {code}")
