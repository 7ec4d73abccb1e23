"""Where a run's learner runs: :class:`LearnerPlacement`, read the same way by the wiring
for one process and for N learner processes.

:class:`SingleProcess` (the default) learns on this process's devices;
:class:`~jaxsrl.launch.learner_group.LearnerGroup` (``--num_learner_processes`` > 1)
makes this process learner process 0 of a group. The launcher builds each trainer and
inference server through these methods and never asks which one it has.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.launch.learner_group import LearnerGroup
from jaxsrl.parallel import devices
from jaxsrl.streams.params import ParameterStore


class LearnerPlacement(Protocol):
    """What the wiring asks of the learner's placement.

    Attributes:
      processes: learner processes (1: this one alone); each takes
        ``batch_segments / processes`` segments per update.
      local_mesh: this process's devices (inference servers run ``act`` over them).
    """

    processes: int
    local_mesh: Any

    def jit_act(self, act: Callable) -> Callable:
        """``act`` jitted for the inference servers of this process."""

    def parameter_store(self) -> ParameterStore:
        """Where trainers publish parameters and local servers read them."""

    def checkpointer(self, directory: str, keep: int) -> Checkpointer:
        """The checkpointer of one policy (``directory``: its folder)."""

    def share_state(self, trainer: str, policy: str, state: Any, rng: Any, version: int, *,
                    num_updates: int, max_rows: int) -> tuple[Any, Any]:
        """The trainer's starting ``(state, rng)`` (handed to every learner process)."""

    def jit_learn(self, learn: Callable) -> Callable:
        """``learn`` jitted over the learner's devices."""

    def put_batch(self, batch: Any) -> Any:
        """A host batch of this process's rows -> the learner's device batch."""

    def gate(self, policy: str, metrics: MetricsAccumulator) -> Callable | None:
        """The trainer's ``before_update`` hook (``None``: none)."""

    def sample_address(self, actor_index: int, own: str) -> str:
        """Sample-stream address of actor ``actor_index`` (``own``: this process's trainer)."""

    def watchers(self) -> list:
        """Extra workers of the launcher that watch the learner (e.g. its other processes)."""

    def close(self) -> None:
        """Release the placement at the end of the run (never raises)."""


class SingleProcess:
    """The learner is this process, on its local devices (see :class:`LearnerPlacement`)."""

    processes = 1

    def __init__(self):
        self.local_mesh = devices.local_mesh()

    def jit_act(self, act: Callable) -> Callable:
        return devices.jit_act(act, self.local_mesh)

    def parameter_store(self) -> ParameterStore:
        return ParameterStore()

    def checkpointer(self, directory: str, keep: int) -> Checkpointer:
        return Checkpointer(directory, keep)

    def share_state(self, trainer: str, policy: str, state: Any, rng: Any, version: int, *,
                    num_updates: int, max_rows: int) -> tuple[Any, Any]:
        return state, rng

    def jit_learn(self, learn: Callable) -> Callable:
        return devices.jit_learn(learn, self.local_mesh)

    def put_batch(self, batch: Any) -> Any:
        return devices.put_batch(batch, self.local_mesh)

    def gate(self, policy: str, metrics: MetricsAccumulator) -> None:
        return None

    def sample_address(self, actor_index: int, own: str) -> str:
        return own

    def watchers(self) -> list:
        return []

    def close(self) -> None:
        pass


def learner_placement(cfg: Any, spawner: Any = None) -> LearnerPlacement:
    """The placement ``cfg`` asks for (call before any other JAX call: a group joins its
    processes first).

    Raises:
      ValueError, distributed.PeerError: see :meth:`LearnerGroup.start`.
    """
    if cfg.num_learner_processes > 1:
        return LearnerGroup.start(cfg, spawner)
    return SingleProcess()
