"""One policy as an inline actor runs it: the agent's jitted ``act`` and the newest
parameters received on the learner's parameter stream.

The parameters arrive as ``param_chunk`` messages on a SUB socket
(:mod:`jaxsrl.streams.param_stream`); :meth:`InlinePolicy.poll` takes whatever is
waiting without blocking (the actor calls it before each ``act``), and every complete,
checked version replaces the previous one (:class:`~jaxsrl.streams.param_subscriber.
ParamSubscriber`: a malformed, incomplete, mismatched or older version is dropped with a
one-line logged reason, counted in ``dropped``, and the parameters in use stay). This
module imports JAX: only the inline path (:mod:`jaxsrl.workers.inline.client`) imports it,
never the plain actor.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import numpy as np
import zmq

from jaxsrl.streams.carry import CarryCodec
from jaxsrl.streams.param_subscriber import ParamSubscriber
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.spaces import obs_schema, unflatten_obs

#: most parameter messages one :meth:`InlinePolicy.poll` takes (then the actor steps on).
MAX_MESSAGES_PER_POLL = 4096


def _act_step(act: Callable) -> Callable:
    """``act`` with its RNG split inside the same jitted call (one dispatch per step)."""

    def step(params, obs, carry, key):
        key, sub = jax.random.split(key)
        action, carry, extras = act(params, obs, carry, sub)
        return key, action, carry, extras["logp"]

    return step


class InlinePolicy:
    """The newest parameters of ``policy`` and the agent's ``act`` over them.

    Args:
      policy: the policy's name (its parameter-stream topic).
      act: the agent's ``act(params, obs, carry, rng) -> (action, carry, extras)``
        (``AgentFns.act``; jitted here, on this process's default device).
      template: a pytree with the parameters' structure, leaf dtypes and shapes (e.g.
        ``jax.eval_shape(fns.init, key).params``): what every version must match.
      initial_carry: the agent's ``initial_carry`` (names the ``carry/i`` arrays).
      observation_space: per-row observation space (the ``obs`` arrays and dtypes).
      param_address: the learner's parameter publisher (``tcp://...`` or ``inproc://...``).
      context: ZeroMQ context of the SUB socket.
      seed: seed of the action-sampling RNG.
      curve: ``(server_public, public, secret)`` to connect as a CURVE client, or ``None``.

    Attributes:
      subscriber: the :class:`ParamSubscriber` checking and assembling versions
        (``version``, ``received``, ``dropped`` by reason, ``last_drop``).
      store: where complete versions land (``store.get(policy)``).
    """

    def __init__(self, policy: str, act: Callable, template: Any, initial_carry: Callable,
                 observation_space: Any, param_address: str, context: zmq.Context,
                 seed: int = 0, curve: tuple | None = None):
        self.policy, self.param_address = policy, param_address
        self.store = ParameterStore()
        self.subscriber = ParamSubscriber(param_address, policy, template, self.store,
                                          context=context, curve=curve)
        self._carry = CarryCodec(initial_carry)
        self._schema = obs_schema(observation_space) | self._carry.schema()
        self._obs_names = list(obs_schema(observation_space))
        self._step = jax.jit(_act_step(act))
        self._key = jax.random.PRNGKey(seed)
        self.socket = self.subscriber.connect()

    @property
    def version(self) -> int:
        """Version of the parameters in use (-1: none received yet)."""
        return self.subscriber.version

    def poll(self, timeout_ms: int = 0) -> bool:
        """Take the parameter messages waiting (after waiting up to ``timeout_ms`` for a
        first one); returns whether a newer version is now in use. Never raises on input."""
        new = False
        if timeout_ms and not self.socket.poll(timeout_ms):
            return False
        for _ in range(MAX_MESSAGES_PER_POLL):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            new = self.subscriber.handle(frames) or new
        return new

    def wait(self, timeout_s: float, stop: Any = None, beat: Callable[[], None] = lambda: None) -> bool:
        """Block until a first version is in use, ``timeout_s`` passed or ``stop`` (an
        event) is set, polling every 100 ms and calling ``beat`` each time; returns
        whether parameters are in use."""
        deadline = time.monotonic() + timeout_s
        while self.version < 0:
            if (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
                return False
            beat()
            self.poll(100)
        return True

    def _inputs(self, named: dict) -> tuple:
        """``(versioned parameters, obs, carry)`` for ``_step`` from one request's rows (:meth:`act`)."""
        versioned = self.store.get(self.policy)
        arrays = {k: np.asarray(named[k], dtype=spec.dtype) for k, spec in self._schema.items()}
        return (versioned, unflatten_obs({k: arrays[k] for k in self._obs_names}),
                self._carry.to_tree(arrays))

    def compile(self, named: dict) -> None:
        """Compile (and run once, discarding the result) ``act`` for requests shaped like
        ``named`` (see :meth:`act`), so the first :meth:`act` of that shape does not
        compile; the RNG is left as it was. May run in another thread than :meth:`act`
        (not at the same time).

        Raises:
          KeyError: no parameters received yet (:meth:`wait` first).
        """
        versioned, obs, carry = self._inputs(named)
        jax.block_until_ready(self._step(versioned.params, obs, carry, self._key))

    def act(self, named: dict) -> tuple[dict, int]:
        """Run ``act`` on one request's rows with the newest parameters.

        Args:
          named: ``obs`` (or ``obs/<key>``) ``[n, ...]`` and ``carry/i`` ``[n, ...]`` arrays,
            as an actor sends them to an inference server.

        Returns:
          ``({"action": [n, ...], "logp": float32 [n], "carry/i": [n, ...]}, version)``: the
          arrays of an inference server's ``action`` reply (NumPy) and the version of the
          parameters that chose them.

        Raises:
          KeyError: no parameters received yet (:meth:`wait` first).
        """
        versioned, obs, carry = self._inputs(named)
        self._key, action, carry, logp = self._step(versioned.params, obs, carry, self._key)
        out = {"action": action, "logp": logp, **self._carry.to_named(carry)}
        return {k: np.asarray(v) for k, v in out.items()}, versioned.version

    def close(self) -> None:
        self.socket.close(linger=0)
