"""Serial mode (``--launcher=serial``): every worker of a run in this one OS process.

The launcher wires the run as usual; only its spawner differs. :class:`ThreadSpawner`
runs each "child process" command (``python -m jaxsrl.workers.actor '<json spec>'``) as
a thread of this process instead: the same :class:`~jaxsrl.workers.actor.worker.Actor`
(:func:`~jaxsrl.workers.actor.process.run_actor`, the body of an actor process) with the
run's ZeroMQ context, and returns a :class:`ThreadProcess`, a ``subprocess.Popen``-like
handle, so the launcher's watch, restart and stop logic is the one of a local run. The
servers bind ``inproc://`` endpoints (:data:`jaxsrl.streams.sockets.INPROC`): the same
sockets, wire format and checks as over TCP, between threads sharing one context. So a
plain debugger steps through actor, policy worker and trainer alike, and tests drive the
workers through their public methods without starting processes.

What it does not cover (refused by ``RunConfig.validate``): remote inference servers,
multi-process learners, Ray, ``launch_prefix``, CURVE (keys reach actors through their
process environment) and periodic evaluation (a process). A thread cannot be killed:
a hung actor thread that ignores its stop event (e.g. stuck inside ``env.step``) is
abandoned (its handle reads as killed, its run id is replaced, so the servers drop
whatever it still sends) and a new one is started; at the end of the run, the run's
ZeroMQ context is terminated under threads still running, so their next ZeroMQ call
ends them (:meth:`ThreadSpawner.end_context`).
ZeroMQ does not enforce ``MAXMSGSIZE`` on ``inproc``; the receivers' size checks still
drop oversized messages.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
from typing import Any, Callable, Sequence

import zmq

from jaxsrl.experiment import events
from jaxsrl.launch.processes import local_spawner
from jaxsrl.streams import sockets
from jaxsrl.workers.actor import process as actor_process
from jaxsrl.workers.inline import worker as inline_worker

log = logging.getLogger("jaxsrl.launch.serial")

#: Seconds :meth:`ThreadProcess.kill` waits for a thread to see its stop event before
#: abandoning it.
KILL_GRACE_S = 2.0


class ThreadProcess:
    """``subprocess.Popen``-like handle of a worker running as a thread of this process.

    ``target(stop)`` runs in the thread and returns its exit code (an exception: 1,
    logged with its traceback). ``terminate`` sets ``stop`` (the worker's SIGTERM);
    ``kill`` does too, waits up to ``KILL_GRACE_S`` and then abandons a thread that is
    still running (``returncode`` ``-SIGKILL``).

    Attributes:
      pid: the thread's native id (as ``top -H`` and debuggers show it).
      returncode: ``None`` while running, then the exit code.
      args: the command it stands for (for ``subprocess.TimeoutExpired``).
    """

    def __init__(self, name: str, target: Callable[[threading.Event], int], args: Sequence[str]):
        self.args, self.returncode = list(args), None
        self.stop = threading.Event()
        self._target, self._exit = target, None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self.pid = self._thread.native_id

    def _run(self) -> None:
        try:
            code = self._target(self.stop)
        except zmq.ContextTerminated:  # the run ended under an abandoned thread: it is killed
            log.info("%s left: the run's ZeroMQ context ended", self._thread.name)
            code = -signal.SIGKILL
        except BaseException:  # noqa: BLE001 - a process would exit with 1 and a traceback
            log.exception("%s failed", self._thread.name)
            code = 1
        self._exit = int(code)

    @property
    def name(self) -> str:
        return self._thread.name

    @property
    def running(self) -> bool:
        """The thread is still running (also after it was abandoned by :meth:`kill`)."""
        return self._thread.is_alive()

    def poll(self) -> int | None:
        if self.returncode is None and not self._thread.is_alive():
            self.returncode = self._exit if self._exit is not None else 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the thread ends; ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        if self.returncode is None:
            self._thread.join(timeout)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def terminate(self) -> None:
        self.stop.set()

    def kill(self) -> None:
        self.stop.set()
        if self.returncode is None:
            self._thread.join(KILL_GRACE_S)
            if self.poll() is None:
                events.emit(log, logging.WARNING, "thread_abandoned", {"thread": self._thread.name},
                            "%s (thread %d) ignores its stop event: abandoned (a thread cannot "
                            "be killed)", self._thread.name, self.pid)
                self.returncode = -signal.SIGKILL


class ThreadSpawner:
    """The :class:`~jaxsrl.launch.processes.Spawner` of serial mode (see module docstring).

    Args:
      context: the run's ZeroMQ context (``inproc://`` endpoints live in it).
    """

    def __init__(self, context: zmq.Context):
        self.context = context
        self.started: list[ThreadProcess] = []

    def __call__(self, argv: list[str], env: dict[str, str], prefix: Sequence[str] = ()) -> ThreadProcess:
        """Run ``argv`` (``[python, "-m", module, json spec]``) as a thread.

        Raises:
          ValueError: a command prefix, extra environment variables, or a module other
            than the actor worker or the inline actor (``--inference=inline``; serial
            mode runs only actors as "child processes").
        """
        if prefix:
            raise ValueError(f"serial mode cannot run a launch_prefix {list(prefix)}")
        if env:
            raise ValueError(f"serial mode cannot give a thread environment variables {sorted(env)}")
        runs = {"jaxsrl.workers.actor": actor_process.run_actor,
                "jaxsrl.workers.inline": inline_worker.run_inline_actor}
        if len(argv) != 4 or argv[1] != "-m" or argv[2] not in runs:
            raise ValueError(f"serial mode runs actor workers only, not {argv[:3]}")
        spec, run = json.loads(argv[3]), runs[argv[2]]
        handle = ThreadProcess(f"actor {spec['actor_id']}",
                               lambda stop: run(spec, self.context, stop), argv)
        self.started = [h for h in self.started if h.running] + [handle]
        return handle

    def running(self) -> list[ThreadProcess]:
        """Threads it started that are still running (abandoned ones included)."""
        return [h for h in self.started if h.running]

    def end_context(self) -> None:
        """End the run's ZeroMQ context once the run's other threads closed their
        sockets: at once if no thread of this spawner runs; else in the background,
        where ``term`` makes the abandoned threads' blocking calls raise
        ``zmq.ContextTerminated`` (they close their sockets and end; one stuck outside
        ZeroMQ keeps the context until it gets there)."""
        if not self.running():
            self.context.destroy(linger=0)
            return
        log.warning("%s still running after the run: the run's ZeroMQ context ends when they do",
                    ", ".join(h.name for h in self.running()))
        threading.Thread(target=self.context.term, name="zmq context term", daemon=True).start()


def spawner_for(context: zmq.Context, given: Any = None) -> ThreadSpawner:
    """Serial mode's spawner for a run whose ZeroMQ context is ``context``.

    Raises:
      ValueError: ``given`` is another spawner (serial mode places nothing elsewhere).
    """
    if given is not None:
        raise ValueError(f"--launcher=serial runs every worker in this process; got spawner {given!r}")
    return ThreadSpawner(context)


def launch_site(cfg: Any, context: zmq.Context, given: Any = None) -> tuple[Any, str, Any]:
    """Where a run's child processes start and its servers bind:
    ``(spawner, bind host, actor threads)``. ``--launcher=serial``: this module's
    :class:`ThreadSpawner` (also the actor threads) and ``inproc``; otherwise ``given``
    (default :func:`~jaxsrl.launch.processes.local_spawner`), ``cfg.host`` and ``None``.

    Raises:
      ValueError: serial mode given another spawner.
    """
    if cfg.launcher != "serial":
        return given or local_spawner, cfg.host, None
    threads = spawner_for(context, given)
    return threads, sockets.INPROC, threads
