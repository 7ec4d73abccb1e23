"""Rung 7, replay buffer alone: insert and sample items/s of ``Replay`` on the device.

Items are transitions of the run config's spaces (``obs`` and ``next_obs`` leaves of
the observation space, ``action``, float32 ``reward``, bool ``done``, int32
``policy_version``), random values made once on the host. The buffer is built from the
agent's ``ReplaySpec`` (``ReplaySpec()`` defaults for on-policy agents); a first add,
sample and set compile what is used (``compile_s``); then, each for ``duration_s``:

- insert: ``add`` of ``add_rows`` host rows back to back (the buffer fills and wraps),
  including the host-to-device copy, waiting for the device at the end;
- sample: ``sample`` back to back on the full buffer, each batch fetched to the host;
- learn cycle (prioritised only): ``sample`` then ``set_priorities`` of the batch, as a
  learner does every update.

Rates are items/s (rows of the buffer), one run per mode (uniform, prioritised).
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np


def transition_item(observation_space, action_space) -> dict:
    """One transition item (zeros) for these spaces: a dict of numpy arrays."""
    from jaxsrl.streams.spaces import action_leaf, space_leaves  # noqa: PLC0415  (bench rungs load JAX and their parts on use)

    item = {}
    for prefix in ("obs", "next_obs"):
        for name, (dtype, shape) in space_leaves(observation_space, prefix).items():
            item[name] = np.zeros(shape, dtype)
    dtype, shape = action_leaf(action_space)
    item.update(action=np.zeros(shape, dtype), reward=np.float32(0), done=np.bool_(False),
                policy_version=np.int32(0))
    return item


def _timed(step, duration_s: float, min_calls: int, finish=lambda: None) -> tuple[int, float]:
    calls, t0 = 0, time.perf_counter()
    while calls < min_calls or time.perf_counter() - t0 < duration_s:
        step()
        calls += 1
    finish()
    return calls, time.perf_counter() - t0


def measure(example_item: dict, spec, duration_s: float = 2.0, add_rows: int = 256,
            seed: int = 0, min_calls: int = 3) -> dict:
    """Insert, sample and learn-cycle items/s of one buffer (see the module doc).

    Args:
      example_item: one item (dict of numpy arrays without the leading axis).
      spec: the ``ReplaySpec`` (capacity, batch size, mode).
      duration_s: measured seconds of each phase.
      add_rows: rows per ``add`` call.
    """
    import jax  # noqa: PLC0415  (bench rungs load JAX and their parts on use)

    from jaxsrl.workers.buffer.replay import Replay  # noqa: PLC0415  (bench rungs load JAX and their parts on use)

    rng = np.random.default_rng(seed)
    rows = {k: (rng.standard_normal((add_rows, *np.shape(v))) * 3).astype(np.asarray(v).dtype)
            for k, v in example_item.items()}
    keys = itertools.cycle(np.asarray(jax.random.split(jax.random.PRNGKey(seed), 100_000)))
    t0 = time.perf_counter()
    replay = Replay(spec, example_item, max_add_chunk=add_rows)
    replay.add(rows)  # first calls compile the one add shape used, sample and set
    batch, ids = replay.sample(next(keys))
    replay.set_priorities(ids, batch.weights)
    replay.block_until_ready()
    compile_s = time.perf_counter() - t0
    inserts, insert_s = _timed(lambda: replay.add(rows), duration_s, min_calls,
                               replay.block_until_ready)
    while replay.size < spec.capacity:
        replay.add(rows)
    samples, sample_s = _timed(lambda: jax.device_get(replay.sample(next(keys))), duration_s,
                               min_calls)
    out = {"capacity": spec.capacity, "batch_size": spec.batch_size, "add_rows": add_rows,
           "item_bytes": int(sum(np.asarray(v).nbytes for v in example_item.values())),
           "insert_items_per_s": inserts * add_rows / insert_s,
           "sample_items_per_s": samples * spec.batch_size / sample_s,
           "compile_s": compile_s}
    if spec.prioritised:
        def cycle():
            batch, ids = replay.sample(next(keys))
            replay.set_priorities(ids, batch.weights + 0.5)
            jax.device_get(batch.items)
        cycles, cycle_s = _timed(cycle, duration_s, min_calls, replay.block_until_ready)
        out["learn_cycle_items_per_s"] = cycles * spec.batch_size / cycle_s
    return out


def measure_for(built, duration_s: float) -> dict:
    """Rung 7 for the run config: both modes at the agent's (or the default) ``ReplaySpec``."""
    from jaxsrl.core.agent import ReplaySpec  # noqa: PLC0415  (bench rungs load JAX and their parts on use)

    spec = built.fns.replay or ReplaySpec()
    item = transition_item(built.observation_space, built.action_space)
    return {mode: measure(item, dataclasses.replace(spec, prioritised=prioritised),
                          duration_s / 2)
            for mode, prioritised in (("uniform", False), ("prioritised", True))}
