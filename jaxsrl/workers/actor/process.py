"""The actor as a process or a serial-mode thread: :func:`run_actor` maps the actor's
failures to exit codes; :func:`main` is ``python -m jaxsrl.workers.actor SPEC_JSON``.

Exit codes: 0 stopped by SIGTERM/SIGINT (or the ``stop`` event); 3 no inference server of a stream answered in
``timeout_s`` (``startup_timeout_s``, default 300 s, for the first answer: servers
compile while actors start; with fallbacks, after every server was tried); 4 the
environment raised in ``reset`` or ``step`` (traceback logged, and written to
``spec["error_file"]`` if given); 5 the learner did not take a segment in
``sample_timeout_s`` (default ``10 * timeout_s``); 1 any other error (traceback on
stderr). The timeouts (3, 5) leave their one-line reason in ``spec["error_file"]`` too.

No JAX here (the actor's contract, ``pyproject.toml``).
"""

from __future__ import annotations

import logging
from typing import Any

import zmq

from jaxsrl.core.child import report_failure, start_child, write_error
from jaxsrl.core.exit_codes import EXIT_ENV_ERROR, EXIT_LEARNER_TIMEOUT, EXIT_SERVER_TIMEOUT
from jaxsrl.workers.actor.action_client import ClientFactory
from jaxsrl.workers.actor.segments import EnvError
from jaxsrl.workers.actor.worker import Actor, LearnerTimeout

log = logging.getLogger("jaxsrl.actor")


def run_actor(spec: dict, context: zmq.Context | None = None, stop: Any = None,
              client: ClientFactory | None = None) -> int:
    """Build and run one actor until it stops; returns its exit code (module docstring).

    The body of an actor process (:func:`main`), and of an actor thread in serial mode
    (``context``: the run's ZeroMQ context; ``stop``: an event that ends the actor within
    100 ms of a blocking wait); ``client``: the actor's action client factory
    (:class:`~jaxsrl.workers.actor.worker.Actor`'s argument; ``None``: its inference
    servers'). Errors other than the ones with an exit code propagate.
    """
    actor = None
    try:
        actor = Actor(spec, context, client)
        if stop is not None:
            actor.stop = stop
        actor.run()
    except LearnerTimeout as exc:
        log.error("%s; exiting", exc)
        write_error(spec.get("error_file"), str(exc))
        return EXIT_LEARNER_TIMEOUT
    except TimeoutError as exc:
        log.error("%s; exiting", exc)
        write_error(spec.get("error_file"), str(exc))
        return EXIT_SERVER_TIMEOUT
    except EnvError as exc:
        return report_failure(spec, str(exc), exc.__cause__ or exc, EXIT_ENV_ERROR)
    finally:
        if actor is not None:
            actor.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.actor SPEC_JSON``; returns the exit code (module docstring)."""
    spec = start_child(argv, lambda s: f"actor {s.get('actor_id')}")
    return run_actor(spec)
