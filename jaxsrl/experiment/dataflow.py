"""The experiment as data: worker groups joined by named streams (SRL's central idea).

A :class:`Dataflow` lists actor groups, policy (inference) workers and trainer
(learner) workers; streams are just names shared between them. The launcher builds
whatever graph it is given, so "two policies fed by two actor groups" or "two
inference servers sharing one learner" need a config, not new runtime code::

    Dataflow(
        actors=(ActorGroup("actors", count=2, inference_stream="inference",
                           sample_stream="samples"),),
        policy_workers=(PolicyWorkerSpec("policy", inference_stream="inference",
                                         policy="default"),),
        trainers=(TrainerSpec("trainer", sample_stream="samples", policy="default"),))

Off-policy agents (``AgentFns.replay`` set) add a ``buffer`` (replay) worker between a
sample stream and its trainer (:class:`BufferSpec`): segments go into the replay, the
trainer samples batches from it and writes back priorities. The launcher adds one with
the default placement, ``"learner"``, to the stream of every off-policy trainer that
has none (``jaxsrl/workers/learner/replay_setup.py``); a ``buffers`` list in the
``[dataflow]`` table names them explicitly::

    buffers = [{name = "replay", sample_stream = "samples", placement = "learner"}]

or places the replay in separate buffer processes (``placement = "process"``, ``count``
shards, each fed by every ``count``-th actor process)::

    buffers = [{name = "replay", sample_stream = "samples", placement = "process", count = 2}]

Rules (checked by :meth:`Dataflow.validate`): every inference stream is served by
exactly one policy worker and every sample stream is read by exactly one trainer;
each policy has exactly one trainer; an actor group's two streams belong to the same
policy; a buffer sits on a stream that a trainer reads, at most one per stream.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional


@dataclasses.dataclass(frozen=True)
class ActorGroup:
    """``count`` actor processes sharing one configuration.

    Attributes:
      name: group name (process names, logs).
      count: actor processes in the group.
      inference_stream: stream carrying observations to a policy worker.
      sample_stream: stream carrying trajectory segments to a trainer.
      envs_per_actor: environments per process (0: the run's ``envs_per_actor``).
      teams: for multi-agent envs with a policy per team: team -> ``[inference_stream,
        sample_stream]`` for that team's agents (then the two fields above are unused).
      launch_prefix: command prefix that places the group's processes, e.g.
        ``["ip", "netns", "exec", "host1"]`` (empty: this machine). The prefix must keep
        the launcher as the process's parent (actors exit when their parent is not the
        launcher), so ``ssh`` does not fit; use ``--launcher=ray`` for other machines.
    """

    name: str
    count: int
    inference_stream: str = ""
    sample_stream: str = ""
    envs_per_actor: int = 0
    teams: Optional[dict] = None
    launch_prefix: tuple = ()

    def bindings(self) -> list:
        """``[(team or None, inference_stream, sample_stream), ...]`` of this group."""
        if self.teams:
            return [(team, pair[0], pair[1]) for team, pair in sorted(self.teams.items())]
        return [(None, self.inference_stream, self.sample_stream)]


@dataclasses.dataclass(frozen=True)
class PolicyWorkerSpec:
    """Inference server(s) reading ``policy``'s parameters, serving ``inference_stream``.

    Attributes:
      count: servers of the stream; its actors are dealt out round-robin
        (``jaxsrl/launch/topology.py``); several are named ``name[0]``, ``name[1]``, ...
      launch_prefix: command prefix placing remote servers (``--remote_inference``),
        like :attr:`ActorGroup.launch_prefix`.
    """

    name: str
    inference_stream: str
    policy: str
    count: int = 1
    launch_prefix: tuple = ()


@dataclasses.dataclass(frozen=True)
class TrainerSpec:
    """A learner of ``policy`` reading ``sample_stream``."""

    name: str
    sample_stream: str
    policy: str


#: Where a buffer worker may run. ``"learner"`` (the default): inside the trainer of its
#: stream (a thread of the accelerator process), the items on the trainer's first device,
#: so sampling never crosses the host (``jaxsrl/workers/learner/replay_trainer.py``).
#: ``"process"``: ``count`` separate buffer processes (``jaxsrl/workers/buffer/server.py``)
#: fed by the sample stream, holding the replay in host memory and serving batches to the
#: trainer over a stream, for replay larger than the learner's memory.
BUFFER_PLACEMENTS = ("learner", "process")


@dataclasses.dataclass(frozen=True)
class BufferSpec:
    """A replay (buffer) worker storing the segments of ``sample_stream`` for its trainer.

    Attributes:
      name: worker name (logs).
      sample_stream: the stream whose segments it stores; read by exactly one trainer,
        which samples its batches from this buffer.
      placement: one of :data:`BUFFER_PLACEMENTS` (default ``"learner"``).
      count: buffer processes (shards) of a ``"process"`` buffer: actor process ``i``
        feeds shard ``i % count``, the trainer draws from them in turn; capacity and
        minimum fill are divided among them. 1 for ``"learner"``.
    """

    name: str
    sample_stream: str
    placement: str = "learner"
    count: int = 1


@dataclasses.dataclass(frozen=True)
class Dataflow:
    """Worker groups and the streams between them (``buffers``: replay workers of
    off-policy trainers, none for on-policy graphs)."""

    actors: tuple
    policy_workers: tuple
    trainers: tuple
    buffers: tuple = ()

    @classmethod
    def from_dict(cls, data: Mapping) -> "Dataflow":
        """Build from plain data (e.g. a ``[dataflow]`` table of a TOML config).

        Raises:
          ValueError: unknown keys or missing fields, naming them.
        """
        unknown = set(data) - {"actors", "policy_workers", "trainers", "buffers"}
        if unknown:
            raise ValueError(f"unknown dataflow keys {sorted(unknown)}")

        def build(kind, items):
            out = []
            for item in items:
                try:
                    out.append(kind(**item))
                except TypeError as exc:
                    raise ValueError(f"bad {kind.__name__} {dict(item)!r}: {exc}") from None
            return tuple(out)

        return cls(build(ActorGroup, data.get("actors", ())),
                   build(PolicyWorkerSpec, data.get("policy_workers", ())),
                   build(TrainerSpec, data.get("trainers", ())),
                   build(BufferSpec, data.get("buffers", ())))

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first broken rule (see module docstring)."""
        if not self.actors or not self.policy_workers or not self.trainers:
            raise ValueError("a dataflow needs at least one actor group, policy worker and trainer")
        names = [w.name for w in (*self.actors, *self.policy_workers, *self.trainers, *self.buffers)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"worker names must be unique, repeated: {sorted(dup)}")
        serving = {}
        for w in self.policy_workers:
            if type(w.count) is not int or w.count < 1:  # noqa: E721
                raise ValueError(f"policy worker {w.name!r} has count={w.count!r}; need an integer >= 1")
            if not isinstance(w.launch_prefix, (list, tuple)) or not all(
                    isinstance(p, str) for p in w.launch_prefix):
                raise ValueError(f"policy worker {w.name!r}: launch_prefix must be a list of "
                                 f"strings, got {w.launch_prefix!r}")
            if w.inference_stream in serving:
                raise ValueError(f"inference stream {w.inference_stream!r} has two servers")
            serving[w.inference_stream] = w.policy
        learning = {}
        for t in self.trainers:
            if t.sample_stream in learning:
                raise ValueError(f"sample stream {t.sample_stream!r} has two trainers")
            if t.policy in learning.values():
                raise ValueError(f"policy {t.policy!r} has two trainers")
            learning[t.sample_stream] = t.policy
        for w in self.policy_workers:
            if w.policy not in learning.values():
                raise ValueError(f"policy worker {w.name!r} serves policy {w.policy!r}, "
                                 "which no trainer learns")
        for a in self.actors:
            if a.count < 1:
                raise ValueError(f"actor group {a.name!r} has count={a.count}; need >= 1")
            if not isinstance(a.launch_prefix, (list, tuple)) or not all(
                    isinstance(p, str) for p in a.launch_prefix):
                raise ValueError(f"actor group {a.name!r}: launch_prefix must be a list of "
                                 f"strings, got {a.launch_prefix!r}")
            if a.teams is not None and not all(
                    isinstance(v, (list, tuple)) and len(v) == 2 for v in a.teams.values()):
                raise ValueError(f"actor group {a.name!r}: teams must map team -> "
                                 f"[inference_stream, sample_stream], got {a.teams!r}")
            for _, inference, sample in a.bindings():
                if inference not in serving:
                    raise ValueError(f"actor group {a.name!r}: no policy worker serves "
                                     f"inference stream {inference!r}")
                if sample not in learning:
                    raise ValueError(f"actor group {a.name!r}: no trainer reads "
                                     f"sample stream {sample!r}")
                if serving[inference] != learning[sample]:
                    raise ValueError(f"actor group {a.name!r} acts with policy "
                                     f"{serving[inference]!r} but feeds the trainer of "
                                     f"{learning[sample]!r}")

        buffered = set()
        for b in self.buffers:
            if b.sample_stream not in learning:
                raise ValueError(f"buffer {b.name!r}: no trainer reads sample stream "
                                 f"{b.sample_stream!r}")
            if b.sample_stream in buffered:
                raise ValueError(f"sample stream {b.sample_stream!r} has two buffers")
            buffered.add(b.sample_stream)
            if b.placement not in BUFFER_PLACEMENTS:
                raise ValueError(f"buffer {b.name!r}: placement={b.placement!r}; valid: "
                                 f"{list(BUFFER_PLACEMENTS)}")
            if type(b.count) is not int or b.count < 1 or (b.count > 1 and b.placement != "process"):  # noqa: E721
                raise ValueError(f"buffer {b.name!r}: count={b.count!r}; need an integer >= 1, "
                                 "and 1 unless placement='process'")

    def policies(self) -> list[str]:
        return [t.policy for t in self.trainers]

    def buffer_for(self, sample_stream: str) -> BufferSpec | None:
        """The buffer on ``sample_stream``, or ``None``."""
        return next((b for b in self.buffers if b.sample_stream == sample_stream), None)

    def with_buffers(self, sample_streams) -> "Dataflow":
        """This graph with a learner-placed buffer on each of ``sample_streams`` that has
        none: ``"replay"`` for the first added, ``"replay_<stream>"`` if that is taken."""
        added = []
        names = {w.name for w in (*self.actors, *self.policy_workers, *self.trainers, *self.buffers)}
        for stream in sample_streams:
            if self.buffer_for(stream) is None and stream not in [b.sample_stream for b in added]:
                name = "replay" if "replay" not in names else f"replay_{stream}"
                names.add(name)
                added.append(BufferSpec(name, stream))
        return dataclasses.replace(self, buffers=self.buffers + tuple(added)) if added else self


def default_dataflow(num_actors: int, inference_servers: int = 1) -> Dataflow:
    """One actor group, ``inference_servers`` inference servers and one learner of the
    policy ``"default"``."""
    return Dataflow(
        actors=(ActorGroup("actors", num_actors, "inference", "samples"),),
        policy_workers=(PolicyWorkerSpec("policy", "inference", "default", inference_servers),),
        trainers=(TrainerSpec("trainer", "samples", "default"),))
