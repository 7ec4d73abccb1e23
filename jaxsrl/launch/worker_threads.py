"""The worker threads of a run's accelerator process, as the launcher sees them.

Every worker the launcher runs as a thread (trainers, local inference servers, the
supervisor of remote inference servers, the watch of a multi-process learner) has the
same lifecycle surface, :class:`Worker`; its :class:`Kind` says whether the launcher
checkpoints it at the end (trainers). Whether an inference server is alive is asked of
the run's inference backend (:mod:`jaxsrl.launch.inference_backends`), not of a worker.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from typing import Protocol


class Worker(Protocol):
    """Lifecycle surface of a worker thread.

    Attributes:
      name: for logs and errors (``trainer``, ``policy[1]``, ...).
      ready: set once its sockets are bound (or it failed: then ``error`` is set).
      stop: set by the launcher to end ``run``.
      serving: set while it answers (after warm-up).
      heartbeat: ``time.monotonic()`` of its loop's last turn.
      error: the exception that ended ``run``, or ``None``.
    """

    name: str
    ready: threading.Event
    stop: threading.Event
    serving: threading.Event
    heartbeat: float
    error: BaseException | None

    def run(self) -> None: ...


class Kind(enum.Enum):
    """What a worker thread is, for the launcher."""

    TRAINER = "trainer"  # a TrainerWorker: checkpointed at the end
    SERVER = "server"  # a local PolicyWorker: one inference server
    WATCH = "watch"  # watches or feeds something outside the process (learner, server or
    #                  buffer processes, inline actors), or a thread of its own (PBT, league)


@dataclasses.dataclass
class WorkerThread:
    """One worker and the thread running it (started by :meth:`start`)."""

    worker: Worker
    kind: Kind
    thread: threading.Thread = dataclasses.field(init=False)

    def __post_init__(self):
        self.thread = threading.Thread(target=self.worker.run, name=self.worker.name, daemon=True)

    @property
    def name(self) -> str:
        return self.worker.name

    def start(self) -> None:
        self.thread.start()

    @property
    def started(self) -> bool:
        return self.thread.ident is not None
