"""The inline action client: an actor that runs the policy in its own process.

SRL's inline inference (Mei et al. 2023, Sec. 3.2): instead of sending observations to
an inference server and waiting for actions, the actor calls the agent's ``act`` on its
own CPU core. :class:`InlineClient` is an
:class:`~jaxsrl.workers.actor.action_client.ActionClient`; the
:class:`~jaxsrl.workers.actor.worker.Actor` around it is the plain one (the same ring of
environment groups, segments, sample stream, backpressure and exit codes):

* :meth:`~InlineClient.request` answers at once: a non-blocking poll of the parameter
  stream, then :meth:`InlinePolicy.act <jaxsrl.workers.inline.policy.InlinePolicy.act>`
  with the newest complete version received; the actions (with behaviour
  log-probabilities, the version that chose them and the rows' new carry) wait in a
  queue that :meth:`~InlineClient.receive` empties in order;
* :meth:`~InlineClient.ping`, and :meth:`~InlineClient.receive` every
  ``ping_interval_s``, PUSH an ``inline_status`` message (meta ``{actor, run, versions:
  {policy: version in use}, dropped: {policy: {reason: count}}}``, run-long counts of
  dropped parameter messages) to the launcher's
  :class:`~jaxsrl.launch.inline_params.InlineParameters`, which marks the actor alive
  (hang detection, also while it waits on its learner) and logs ``param_lag/inline``;
* :meth:`~InlineClient.prepare`, before the first request: waits up to
  ``startup_timeout_s`` for a first version of each policy, then compiles ``act`` for
  each stream's request shape in a thread while the actor keeps beating and statuses
  keep going, so a compile longer than the launcher's ``actor_heartbeat_timeout_s`` is
  not taken for a hang.

Parameters come from the learner's parameter stream (:mod:`jaxsrl.streams.param_stream`,
the PUB/SUB stream remote inference servers subscribe to); a malformed parameter message
is dropped with a one-line reason and the parameters in use stay. The spec's ``inline``
settings: ``{param_address, status_address (or None), agent, agent_config, env,
env_kwargs, compilation_cache_dir}``. This module imports JAX: only the inline path
(:mod:`jaxsrl.workers.inline`) imports it, never the plain actor.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Mapping, Sequence

import jax
import numpy as np
import zmq

from jaxsrl.experiment.agent_build import factory_of_spec
from jaxsrl.parallel.compile_cache import enable_compilation_cache
from jaxsrl.streams.sockets import open_socket
from jaxsrl.streams.status import INLINE_STATUS
from jaxsrl.workers.actor.action_client import Actions, Alive
from jaxsrl.workers.actor.spec import ActorSpec
from jaxsrl.workers.inline.policy import InlinePolicy


class InlineClient:
    """:class:`~jaxsrl.workers.actor.action_client.ActionClient` running the policy
    itself (module docstring); a
    :data:`~jaxsrl.workers.actor.action_client.ClientFactory`.

    Args:
      spec: the actor spec with its ``inline`` settings.
      context: ZeroMQ context of its sockets.
      curve: ``(server_public, public, secret)`` CURVE client keys, or ``None``.

    Attributes:
      policies: policy name -> its :class:`~jaxsrl.workers.inline.policy.InlinePolicy`.

    Raises:
      ValueError: no ``inline`` settings in the spec, an unknown agent or environment.
    """

    def __init__(self, spec: ActorSpec, context: zmq.Context, curve: tuple | None = None):
        settings = spec.inline
        if not settings:
            raise ValueError("an inline actor needs the spec's 'inline' settings")
        enable_compilation_cache(settings.get("compilation_cache_dir"))
        self.actor_id, self.run_id = spec.actor_id, spec.run_id
        self.startup_timeout_s, self.ping_interval_s = spec.startup_timeout_s, spec.ping_interval_s
        self.stream_policy = [s.policy for s in spec.streams]
        factory = factory_of_spec({"env_kwargs": spec.env_kwargs, **settings})
        fns = factory.make(1)  # act only
        template = jax.eval_shape(fns.init, jax.random.PRNGKey(0)).params
        self.policies: dict[str, InlinePolicy] = {}
        self._status = None
        try:
            for k, name in enumerate(sorted(set(self.stream_policy))):
                self.policies[name] = InlinePolicy(
                    name, fns.act, template, fns.initial_carry, factory.env.observation_space,
                    settings["param_address"], context,
                    seed=hash((spec.seed, spec.actor_id, spec.run_id, k)) % 2**31, curve=curve)
            if settings.get("status_address"):
                self._status = open_socket(context, zmq.PUSH, linger_ms=0, send_hwm=4,
                                           curve_client=curve)
                self._status.connect(settings["status_address"])
        except BaseException:
            self.close()
            raise
        self._ready: collections.deque = collections.deque()  # Actions not yet received
        self._last_status = 0.0

    # -- the protocol ------------------------------------------------------------------
    def prepare(self, examples: Sequence[tuple[int, dict]], alive: Alive) -> bool:
        """Wait for every policy's first parameters, then compile ``act`` for the
        examples' shapes (one compile per policy and row count) in a thread, beating
        ``alive`` and sending statuses meanwhile; returns False if ``alive.stop`` was set
        first (a compile under way is left to finish in its daemon thread).

        Raises:
          TimeoutError: no parameters of a policy within ``startup_timeout_s``.
          Exception: what the compile raised.
        """
        for name, policy in self.policies.items():
            if not policy.wait(self.startup_timeout_s, alive.stop, lambda: self._alive(alive)):
                if alive.stop.is_set():
                    return False
                raise TimeoutError(f"no parameters of policy {name!r} arrived from "
                                   f"{policy.param_address} within {self.startup_timeout_s:g} s")
        jobs: dict = {}
        for i, named in examples:
            policy = self.stream_policy[i]
            rows = len(next(iter(named.values())))
            jobs.setdefault((policy, rows), (self.policies[policy], named))
        errors: list = []

        def compile_all() -> None:
            try:
                for policy, named in jobs.values():
                    policy.compile(named)
            except BaseException as exc:  # noqa: BLE001  (raised again in the actor's thread)
                errors.append(exc)

        thread = threading.Thread(target=compile_all, name=f"compile of act (actor {self.actor_id})",
                                  daemon=True)
        thread.start()
        while thread.is_alive():
            if alive.stop.is_set():
                return False
            self._alive(alive)
            thread.join(min(0.1, self.ping_interval_s))
        if errors:
            raise errors[0]
        return True

    def request(self, group: int, stream: int, arrays: dict, meta: dict,
                kept: np.ndarray | None = None) -> None:
        """Act at once with the newest parameters received (the result waits for
        :meth:`receive`); ``meta`` and ``kept`` are not needed here.

        Raises:
          KeyError: no parameters received yet (:meth:`prepare` first).
        """
        policy = self.policies[self.stream_policy[stream]]
        policy.poll()  # non-blocking: the newest version received
        out, version = policy.act(arrays)
        self._ready.append(Actions(stream, group, version, out))

    def receive(self, waiting: Mapping[int, Sequence[int]], alive: Alive) -> Actions | None:
        """The oldest actions not yet received; ``None`` once ``alive.stop`` is set.

        Raises:
          RuntimeError: none is ready, so a group waits on actions the actor refused
            (the agent's ``act`` gave wrong shapes: see the actor's logged reasons).
        """
        if alive.stop.is_set():
            return None
        self._alive(alive)
        if not self._ready:
            raise RuntimeError("the agent's act gave actions the actor refused (see the "
                               "'dropping the actions' lines): wrong action, logp or carry shapes")
        return self._ready.popleft()

    def ping(self) -> None:
        """Send an ``inline_status`` (alive, versions in use, parameter drops)."""
        self._last_status = time.monotonic()
        if self._status is None:
            return
        meta = {"actor": self.actor_id, "run": self.run_id,
                "versions": {n: p.version for n, p in self.policies.items()},
                "dropped": {n: dict(p.subscriber.dropped) for n, p in self.policies.items()}}
        try:
            self._status.send_multipart(INLINE_STATUS.encode(meta), flags=zmq.NOBLOCK)
        except zmq.Again:  # the launcher is busy: the next status will do
            pass

    def take_failovers(self) -> int:
        """No servers, no failovers: 0."""
        return 0

    def close(self) -> None:
        for p in self.policies.values():
            p.close()
        if self._status is not None:
            self._status.close()

    # -- helpers -----------------------------------------------------------------------
    def _alive(self, alive: Alive) -> None:
        """Beat, and send a status when ``ping_interval_s`` passed since the last."""
        alive.beat()
        if time.monotonic() - self._last_status >= self.ping_interval_s:
            self.ping()
