"""Where a run's inference runs, as the launcher sees it: one :class:`InferenceBackend`.

:func:`inference_backend` picks it from the config, the only place that reads the
inference mode on the launch side:

* :class:`ThreadServers`: local policy workers
  (:class:`~jaxsrl.workers.inference.policy.PolicyWorker`), threads of the learner process;
* :class:`ProcessServers`: remote inference server processes, started, fed and restarted
  by :class:`~jaxsrl.launch.remote_inference.RemoteInferenceServers` (``--inference=process``);
* :class:`InlineBackend`: the actors act themselves
  (:mod:`jaxsrl.workers.inline`); the learner publishes parameters to them and collects
  their status (:class:`~jaxsrl.launch.inline_params.InlineParameters`);
* :class:`DeviceActors`: a JAX-native env steps inside the learners' compiled calls
  (:mod:`jaxsrl.launch.device_trainers`): no servers and no actor processes.

``actor_placement`` (``"cpu"`` or ``"device"``) is what the builders ask of it.

A backend is made before the run's CURVE keys (:meth:`InferenceBackend.client_keys`), built
once the trainers exist (:meth:`InferenceBackend.build`, which returns its worker threads,
started by the wiring), and then answers what each actor process needs
(:meth:`~InferenceBackend.actor_module`, :meth:`~InferenceBackend.assign`,
:meth:`~InferenceBackend.inline_spec`) and whether the servers an actor waited for are
alive (:meth:`~InferenceBackend.liveness`).
"""

from __future__ import annotations

from typing import Any, Protocol

from jaxsrl.envs.jax_native import is_jax_native
from jaxsrl.experiment.agent_build import agent_spec
from jaxsrl.launch.inline_params import InlineParameters
from jaxsrl.launch.remote_inference import RemoteInferenceServers
from jaxsrl.launch.topology import ACTOR_MODULE, INLINE_MODULE, Assigner, envs_of, server_names
from jaxsrl.launch.worker_threads import Kind, WorkerThread
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker

#: What the backends' ``build`` gets: the launcher's :class:`~jaxsrl.launch.control.Run`
#: (named, not imported: the control loop imports this module's protocol).
Run = Any


class InferenceBackend(Protocol):
    """What the launcher asks of where inference runs (module docstring).

    Attributes:
      actor_placement: ``"cpu"`` (actor processes step the envs) or ``"device"``.
    """

    actor_placement: str

    def client_keys(self, flow: Any) -> int:
        """CURVE client key pairs this backend's own processes need (after the actors')."""

    def build(self, run: Run, setup: Any) -> list[WorkerThread]:
        """Build its workers for ``run`` (trainers and self-play pools built); not started."""

    def actor_module(self) -> str:
        """The ``python -m`` module of the run's actor processes."""

    def assign(self, inference_stream: str) -> tuple[str, ...]:
        """The inference servers of the next actor on ``inference_stream`` (after
        ``ready``): its own first, then its fallbacks; ``()`` for an inline actor."""

    def inline_spec(self) -> dict | None:
        """The actors' ``inline`` spec entry (after ``ready``), or ``None``."""

    def liveness(self, addresses: set[str]) -> list[tuple[bool, float]]:
        """``(serving, time.monotonic() of the last loop turn)`` of each server listening
        at one of ``addresses`` (``[]`` when there are none)."""

    def compiling(self) -> str:
        """What compiles while the actors start, for the log line."""


def inference_backend(cfg: Any) -> InferenceBackend:
    """The run's inference backend, picked from ``cfg.inference`` (``"auto"`` already
    resolved by :func:`jaxsrl.experiment.inline.auto_mode`).

    A JAX-native ``cfg.env`` gets :class:`DeviceActors` (``cfg.inference`` is ``"auto"``:
    any other value is refused by the config's checks).

    Raises:
      ValueError: ``cfg.inference`` is still ``"auto"`` or not a mode.
    """
    if is_jax_native(cfg.env):
        return DeviceActors()
    backends = {"inline": InlineBackend, "process": ProcessServers, "thread": ThreadServers}
    if cfg.inference not in backends:
        raise ValueError(f"inference={cfg.inference!r} is not resolved to one of "
                         f"{sorted(backends)}")
    return backends[cfg.inference]()


def stream_rows(run: Run, setup: Any) -> dict[str, int]:
    """Inference stream -> rows of all its actors (at least 1): every server of a stream
    can take all its actors in one batch."""
    cfg, flow = run.cfg, run.flow
    return {p.inference_stream: max(1, sum(
        a.count * envs_of(cfg, a) * setup.rows_per_env(team) for a in flow.actors
        for team, inference, _ in a.bindings() if inference == p.inference_stream))
        for p in flow.policy_workers}


def _addresses(fields: dict) -> tuple[str, ...]:
    """The addresses of :meth:`Assigner.next`'s stream fields, own server first."""
    return tuple(fields.get("inference_addresses") or [fields["inference_address"]])


class ThreadServers:
    """Local policy workers, threads of this process, one per server of the dataflow.

    Attributes:
      servers: server name -> its :class:`PolicyWorker` (after :meth:`build`).
    """

    actor_placement = "cpu"

    def __init__(self):
        self.servers: dict[str, PolicyWorker] = {}
        self._assigner: Assigner | None = None

    def client_keys(self, flow: Any) -> int:
        return 0

    def build(self, run: Run, setup: Any) -> list[WorkerThread]:
        cfg, rows = run.cfg, stream_rows(run, setup)
        for i, p in enumerate(run.flow.policy_workers):
            for j, name in enumerate(server_names(p.name, p.count)):
                settings = PolicySettings(
                    max_rows=rows[p.inference_stream], num_devices=run.placement.local_mesh.size,
                    host=run.bind_host, deadline_ms=cfg.inference_deadline_ms,
                    seed=cfg.seed + 7919 * (i + 1) + 104729 * j, curve=run.server_keys)
                self.servers[name] = PolicyWorker(
                    name, p.policy, setup.act, setup.fns.initial_carry,
                    setup.spec.observation_space, run.store, run.metrics, settings,
                    actors=run.table, context=run.context,
                    opponents=run.selfplay.league if run.selfplay else None)
        self._names = {p.inference_stream: server_names(p.name, p.count)
                       for p in run.flow.policy_workers}
        return [WorkerThread(s, Kind.SERVER) for s in self.servers.values()]

    def actor_module(self) -> str:
        return ACTOR_MODULE

    def assign(self, inference_stream: str) -> tuple[str, ...]:
        if self._assigner is None:
            self._assigner = Assigner({s: [self.servers[n].address for n in names]
                                       for s, names in self._names.items()}, fallbacks=False)
        return _addresses(self._assigner.next(inference_stream))

    def inline_spec(self) -> dict | None:
        return None

    def liveness(self, addresses: set[str]) -> list[tuple[bool, float]]:
        return [(s.serving.is_set(), s.heartbeat) for s in self.servers.values()
                if s.address in addresses]

    def compiling(self) -> str:
        return f"act (batch sizes {[s.buckets for s in self.servers.values()]}) and learn compile"


class ProcessServers:
    """Remote inference server processes and their supervisor thread
    (:class:`RemoteInferenceServers`, a ``WATCH`` worker of this process).

    Attributes:
      supervisor: the :class:`RemoteInferenceServers` (after :meth:`build`).
    """

    actor_placement = "cpu"

    def __init__(self):
        self.supervisor: RemoteInferenceServers | None = None
        self._assigner: Assigner | None = None

    def client_keys(self, flow: Any) -> int:
        return sum(p.count for p in flow.policy_workers)

    def build(self, run: Run, setup: Any) -> list[WorkerThread]:
        flow = run.flow
        self.supervisor = RemoteInferenceServers(
            run.cfg, flow, stream_rows(run, setup), run.store, run.metrics, run.table,
            run.actor_runs, run.context, run.logdir, run.keys,
            sum(a.count for a in flow.actors), run.spawner)
        self._streams = [p.inference_stream for p in flow.policy_workers]
        return [WorkerThread(self.supervisor, Kind.WATCH)]

    def actor_module(self) -> str:
        return ACTOR_MODULE

    def assign(self, inference_stream: str) -> tuple[str, ...]:
        if self._assigner is None:
            self._assigner = Assigner({s: self.supervisor.addresses(s) for s in self._streams},
                                      fallbacks=True)
        return _addresses(self._assigner.next(inference_stream))

    def inline_spec(self) -> dict | None:
        return None

    def liveness(self, addresses: set[str]) -> list[tuple[bool, float]]:
        return self.supervisor.liveness(addresses) if self.supervisor is not None else []

    def compiling(self) -> str:
        return "act (in the server processes) and learn compile"


class InlineBackend:
    """Inline actors: the parameter stream to them and their status sink
    (:class:`InlineParameters`, a ``WATCH`` worker of this process); no server.

    Attributes:
      params: the :class:`InlineParameters` (after :meth:`build`).
    """

    actor_placement = "cpu"

    def __init__(self):
        self.params: InlineParameters | None = None
        self._cfg: Any = None

    def client_keys(self, flow: Any) -> int:
        return 0

    def build(self, run: Run, setup: Any) -> list[WorkerThread]:
        self._cfg = run.cfg
        self.params = InlineParameters(run.cfg, [t.policy for t in run.trainers.values()],
                                       run.store, run.metrics, run.table, run.context,
                                       run.bind_host, run.server_keys)
        return [WorkerThread(self.params, Kind.WATCH)]

    def actor_module(self) -> str:
        return INLINE_MODULE

    def assign(self, inference_stream: str) -> tuple[str, ...]:
        return ()

    def inline_spec(self) -> dict | None:
        return {**agent_spec(self._cfg), "param_address": self.params.param_address,
                "status_address": self.params.status_address,
                "compilation_cache_dir": self._cfg.compilation_cache_dir}

    def liveness(self, addresses: set[str]) -> list[tuple[bool, float]]:
        return []

    def compiling(self) -> str:
        return "the actors compile act (inline inference) and learn compiles"


class DeviceActors:
    """Device actors (a JAX-native env): the learners step the environments inside their
    compiled calls; no inference servers, no actor processes."""

    actor_placement = "device"

    def client_keys(self, flow: Any) -> int:
        return 0

    def build(self, run: Run, setup: Any) -> list[WorkerThread]:
        return []

    def actor_module(self) -> str:
        raise RuntimeError("device actors start no actor processes")

    def assign(self, inference_stream: str) -> tuple[str, ...]:
        return ()

    def inline_spec(self) -> dict | None:
        return None

    def liveness(self, addresses: set[str]) -> list[tuple[bool, float]]:
        return []

    def compiling(self) -> str:
        return "the device learners compile their rollout-and-learn steps"
