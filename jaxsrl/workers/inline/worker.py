"""Inline actor (``--inline_inference``): an actor process that runs the policy itself.

SRL's inline inference (Mei et al. 2023, Sec. 3.2): instead of sending observations to
an inference server and waiting for actions, each actor process calls the agent's
``act`` on its own CPU core. :class:`InlineActor` is the plain
:class:`~jaxsrl.workers.actor.worker.Actor` (the same ring of environment groups,
segments, sample stream, backpressure and exit codes) with its three meeting points with
inference servers replaced:

* a request (``_send_request``) is answered at once in this process by
  :meth:`InlinePolicy.act <jaxsrl.workers.inline.policy.InlinePolicy.act>`, after a
  non-blocking poll of the parameter stream, so each action is chosen with the newest
  complete version received; the reply (actions, behaviour log-probabilities, the
  version that chose them, the rows' new carry) is the one a server would send, and the
  actor stores it, records it in the segment and keeps the carry exactly as before;
* ``_receive`` hands over those replies in order (there is no socket to wait on);
* ``_ping`` and a status every ``ping_interval_s``: an ``inline_status`` message (meta
  ``{actor, run, versions: {policy: version in use}, dropped: {reason: count}}``, run-long
  counts of dropped parameter messages) PUSHed to the launcher's
  :class:`~jaxsrl.launch.inline_params.InlineParameters`, which marks the actor alive
  (hang detection, also while it waits on its learner) and logs ``param_lag/inline``.

Parameters come from the learner's parameter stream (:mod:`jaxsrl.streams.param_stream`,
the PUB/SUB stream remote inference servers subscribe to). Before its first request the
actor waits up to ``startup_timeout_s`` for a first version (exit code 3 and a one-line
reason in ``error_file`` if none came), then compiles ``act`` for each stream's request
shape in a thread while it keeps beating and sending statuses, so a compile longer
than the launcher's ``actor_heartbeat_timeout_s`` (a large network, several actors
compiling at once, a cold cache) is not taken for a hang; only then does it step. A
malformed parameter message is dropped with a one-line reason; the parameters in use
stay.

Time spent in ``act`` is reported as the actor's ``wait_s`` (``actor/wait_s``: what the
environments waited for actions). The spec is the actor's plus ``inline``:
``{param_address, status_address (or None), agent, agent_config, env, env_kwargs,
compilation_cache_dir}``. Run as ``python -m jaxsrl.workers.inline '<json spec>'`` (the
launcher does this); the process runs JAX on the CPU, one XLA thread (an actor is one
core's work), unless ``XLA_FLAGS`` / ``JAX_PLATFORMS`` say otherwise.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
from typing import Any

import jax
import zmq

from jaxsrl.core.child import start_child
from jaxsrl.experiment.agent_build import factory_of_spec
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams import security, wire
from jaxsrl.streams.sockets import open_socket
from jaxsrl.workers.actor.segments import take_rows
from jaxsrl.workers.actor.spec import ActorSpec
from jaxsrl.workers.actor.worker import Actor, run_actor
from jaxsrl.workers.inline.policy import InlinePolicy

log = logging.getLogger("jaxsrl.inline_actor")
#: XLA flags of an inline actor process: one thread for ``act`` (the actor is one core's work).
SINGLE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


class InlineActor(Actor):
    """An :class:`~jaxsrl.workers.actor.worker.Actor` that acts itself (module docstring).

    Args:
      spec: the actor spec with its ``inline`` settings (dict or ``ActorSpec``).
      context: ZeroMQ context of its sockets (default: the process-wide one).

    Attributes:
      policies: policy name -> its :class:`~jaxsrl.workers.inline.policy.InlinePolicy`.

    Raises:
      ValueError: a bad spec (no ``inline`` settings), an unknown agent or environment.
      RuntimeError: the spec asks for CURVE but the keypair is not in the environment.
      EnvError: an environment could not be built or reset.
    """

    inline = True

    def __init__(self, spec: dict | ActorSpec, context: zmq.Context | None = None):
        spec = spec if isinstance(spec, ActorSpec) else ActorSpec.from_dict(spec)
        super().__init__(spec, context)
        settings = spec.inline
        enable_compilation_cache(settings.get("compilation_cache_dir"))
        ctx = context or zmq.Context.instance()
        keys = security.client_keys_from_env() if spec.curve_server_key else None
        curve = (spec.curve_server_key, *keys) if keys else None
        factory = factory_of_spec({"env_kwargs": spec.env_kwargs, **settings})
        fns = factory.make(1)  # act only
        template = jax.eval_shape(fns.init, jax.random.PRNGKey(0)).params
        self.policies: dict[str, InlinePolicy] = {}
        for k, name in enumerate(sorted({s.policy for s in self.streams})):
            self.policies[name] = InlinePolicy(
                name, fns.act, template, fns.initial_carry, factory.env.observation_space,
                settings["param_address"], ctx, seed=hash((spec.seed, spec.actor_id, spec.run_id, k))
                % 2**31, curve=curve)
        self._replies: collections.deque = collections.deque()
        self._status = None
        if settings.get("status_address"):
            self._status = open_socket(ctx, zmq.PUSH, linger_ms=0, send_hwm=4, curve_client=curve)
            self._status.connect(settings["status_address"])
        self._last_status = 0.0

    # -- the three meeting points with inference ----------------------------------------
    def _send_request(self, g: int, i: int) -> None:
        group, policy = self.groups[g], self.policies[self.streams[i].policy]
        t0 = time.perf_counter()
        policy.poll()  # non-blocking: the newest version received
        named = take_rows(group.obs, group.rows[i])
        named.update(group.carry[i])
        arrays, version = policy.act(named)
        self.timing["wait_s"] += time.perf_counter() - t0
        self._replies.append((i, wire.Message("action", {"group": g, "version": version}, arrays)))
        group.waiting.add(i)

    def _receive(self) -> tuple[int, wire.Message] | None:
        if self.stop.is_set():
            return None
        self.beat()
        if time.monotonic() - self._last_status >= self.ping_interval_s:
            self._ping()
        if not self._replies:  # every group waits on a reply the actor refused
            raise RuntimeError("the agent's act gave replies the actor refused (see the "
                               "'dropping unexpected reply' lines): wrong action, logp or carry shapes")
        return self._replies.popleft()

    def _ping(self) -> None:
        """Send an ``inline_status`` (alive, versions in use, parameter drops)."""
        self._last_status = time.monotonic()
        if self._status is None:
            return
        meta = {"actor": self.actor_id, "run": self.run_id,
                "versions": {n: p.version for n, p in self.policies.items()},
                "dropped": {n: dict(p.subscriber.dropped) for n, p in self.policies.items()}}
        try:
            self._status.send_multipart(wire.encode("inline_status", {}, meta), flags=zmq.NOBLOCK)
        except zmq.Again:  # the launcher is busy: the next status will do
            pass

    # -- loop ------------------------------------------------------------------------
    def _run(self, max_segments: int | None = None) -> None:
        """Wait for every policy's first parameters, then the actor's loop.

        Raises:
          TimeoutError: no parameters of a policy within ``startup_timeout_s``.
        """
        self.ready.set()
        limit_s = self.startup_timeout_ms / 1000
        for name, policy in self.policies.items():
            if not policy.wait(limit_s, self.stop, self._alive):
                if self.stop.is_set():
                    return
                raise TimeoutError(f"no parameters of policy {name!r} arrived from "
                                   f"{policy.param_address} within {limit_s:g} s")
        if self._compile_act():
            super()._run(max_segments)

    def _alive(self) -> None:
        """Beat, and send a status when ``ping_interval_s`` passed since the last."""
        self.beat()
        if time.monotonic() - self._last_status >= self.ping_interval_s:
            self._ping()

    def _compile_act(self) -> bool:
        """Compile ``act`` for every stream's requests (one per policy and row count) in
        a thread, beating and sending statuses meanwhile; returns False if ``stop`` was
        set first (the compile is left to finish in its daemon thread).

        Raises:
          Exception: what the compile raised.
        """
        group, jobs = self.groups[0], {}
        for i, stream in enumerate(self.streams):
            named = take_rows(group.obs, group.rows[i])
            named.update(group.carry[i])
            jobs.setdefault((stream.policy, len(group.rows[i])), (self.policies[stream.policy], named))
        errors: list = []

        def compile_all() -> None:
            try:
                for policy, named in jobs.values():
                    policy.compile(named)
            except BaseException as exc:  # noqa: BLE001  (raised again in the actor's thread)
                errors.append(exc)

        thread = threading.Thread(target=compile_all, name=f"compile of act ({self.name})", daemon=True)
        thread.start()
        while thread.is_alive():
            if self.stop.is_set():
                return False
            self._alive()
            thread.join(min(0.1, self.ping_interval_s))
        if errors:
            raise errors[0]
        return True

    def close(self) -> None:
        super().close()
        for p in self.policies.values():
            p.close()
        if self._status is not None:
            self._status.close()


def run_inline_actor(spec: dict, context: zmq.Context | None = None, stop: Any = None) -> int:
    """:func:`~jaxsrl.workers.actor.worker.run_actor` for an inline actor (same exit codes)."""
    return run_actor(spec, context, stop, actor_class=InlineActor)


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxsrl.workers.inline SPEC_JSON``; returns the exit code."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in flags and "multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREAD_XLA}".strip()
    if not os.environ.get("JAX_PLATFORMS"):
        jax.config.update("jax_platforms", "cpu")  # the accelerator is the learner's
    spec = start_child(argv, lambda s: f"inline actor {s.get('actor_id')}")
    return run_actor(spec, actor_class=InlineActor)


if __name__ == "__main__":
    sys.exit(main())
