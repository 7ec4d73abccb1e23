"""The inline actor's process (``--inference=inline``): the plain
:class:`~jaxsrl.workers.actor.worker.Actor` built with the
:class:`~jaxsrl.workers.inline.client.InlineClient` (the policy runs in this process).

Run as ``python -m jaxsrl.workers.inline '<json spec>'`` (the launcher does this): the
actor spec plus its ``inline`` settings (:mod:`jaxsrl.workers.inline.client`); the same
exit codes as an actor (:mod:`jaxsrl.workers.actor.process`), 3 also when no parameters
came within ``startup_timeout_s``. The process runs JAX on the CPU, one XLA thread (an
actor is one core's work), unless ``XLA_FLAGS`` / ``JAX_PLATFORMS`` say otherwise.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import jax
import zmq

from jaxsrl.core.child import start_child
from jaxsrl.workers.actor.process import run_actor
from jaxsrl.workers.inline.client import InlineClient

#: XLA flags of an inline actor process: one thread for ``act`` (the actor is one core's work).
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def run_inline_actor(spec: dict, context: zmq.Context | None = None, stop: Any = None) -> int:
    """:func:`~jaxsrl.workers.actor.process.run_actor` with the inline client (same exit codes)."""
    return run_actor(spec, context, stop, client=InlineClient)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.inline SPEC_JSON``; returns the exit code."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in flags and "multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREAD_XLA}".strip()
    if not os.environ.get("JAX_PLATFORMS"):
        jax.config.update("jax_platforms", "cpu")  # the accelerator is the learner's
    spec = start_child(argv, lambda s: f"inline actor {s.get('actor_id')}")
    return run_inline_actor(spec)


if __name__ == "__main__":
    sys.exit(main())
