"""Rung 8, off-policy end to end: Ape-X DQN on CartPole-v1 (replay in the learner, and in
a buffer process) and SAC on HalfCheetah-v5, each through ``train`` with its own
configs (``configs/<agent>/<env>.toml``), whatever the ladder's ``--env``.

Each run is rung 5's measurement (:func:`jaxsrl.bench.end_to_end.run`) with the window
starting once updates have started (the actors run ahead of the learner until the
minimum fill): env steps/s and updates/s end to end, the achieved replay ratio, the
time per update and the sampled items' staleness. Opt-in (``--rungs=offpolicy``), so
the default ladder and ``--quick`` keep their length.
"""

from __future__ import annotations

import os
from typing import Callable

from jaxsrl.bench import end_to_end

#: ``(label, train.py flags)`` of each measured run.
RUNS = (
    ("Ape-X DQN, CartPole-v1 (replay in the learner)", ["--agent=dqn", "--env=CartPole-v1"]),
    ("Ape-X DQN, CartPole-v1 (replay in a buffer process)",
     ["--agent=dqn", "--env=CartPole-v1", "--config=configs/dqn/CartPole-v1-buffer-process.toml"]),
    ("SAC, HalfCheetah-v5", ["--agent=sac", "--env=HalfCheetah-v5"]),
)


def measure(workdir: str, common: dict, warmup_intervals: int, measure_s: float,
            guard: Callable, runs=RUNS) -> list[dict]:
    """One entry per run of ``runs``: its end-to-end measurements (or ``{"error"}``, via
    ``guard(name, fn)``) with ``label`` and ``command``."""
    out = []
    for i, (label, argv) in enumerate(runs):
        point = guard(f"rung 8, off-policy: {label}", lambda argv=argv, i=i: end_to_end.run(
            argv, common, os.path.join(workdir, f"offpolicy{i}"), warmup_intervals, measure_s,
            timeout_s=300.0, learning_only=True))
        point.pop("resolved_config", None)
        point.update(label=label, command="python scripts/train.py " + " ".join(argv))
        out.append(point)
    return out
