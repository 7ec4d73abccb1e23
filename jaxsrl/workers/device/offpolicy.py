"""The compiled step of an off-policy agent on device actors (Podracer's Anakin, as
Stoix runs DQN and SAC): one function

1. rolls ``N`` environments out for ``T`` steps with the agent's own ``act`` (its
   exploration included; :func:`~jaxsrl.workers.device.rollout.make_rollout`);
2. turns the trajectory into replay items with the agent's ``to_items`` and writes all
   ``N * T`` of them into a replay whose flashbax state lives on the device
   (:class:`DeviceReplay`; the pure bodies of :class:`~jaxsrl.workers.buffer.replay.Replay`,
   uniform or proportional prioritised);
3. runs ``K`` = ``max_updates`` iterations of a ``lax.scan``; iteration ``i`` runs an
   update (sample a batch at ``beta(version + i)``, ``learn``, write its priorities
   back) iff ``i < todo``, else leaves state and replay as they are (``lax.cond``).

``todo`` (the learn calls due this step) comes from the host, where the insert count is
an exact integer: :func:`updates_due` is the CPU path's plan
(:func:`~jaxsrl.workers.learner.replay_setup.planned_updates`): none until ``min_fill``
items are in, then ``replay_ratio / batch_size`` per item inserted, so a run ends with
exactly the planned number of ``learn`` calls.

Placement: the environments are split over the local devices (as in the fused
on-policy step); the replay is **replicated**, every device holding the whole buffer
and drawing the same batch with the same key. A sample is then exactly a one-device
replay's (same items, same importance weights normalised over the whole batch, same
priorities written back), whatever the device count; the sampled batch is constrained
to be split over the devices, so ``learn`` is data-parallel as the CPU path's
(:func:`~jaxsrl.parallel.devices.jit_replay_learn`). The cost is an all-gather of the
``N * T`` new items per step and the buffer's memory on every device: off-policy
buffers of small-network agents (10k to 1M items of a few floats) fit easily. A replay
per device would sample ``batch_size / devices`` items from each shard, changing the
weights' normalisation and the sampling distribution with the device count.

Device actors' trajectories have ``valid`` ``None`` (every step valid), so every item
``to_items`` builds is written; its ``valid`` mask is not consulted.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxsrl.core.agent import AgentFns, ReplaySpec
from jaxsrl.parallel import devices
from jaxsrl.workers.buffer.replay import Replay, beta_schedule
from jaxsrl.workers.buffer.stats import policy_version_of
from jaxsrl.workers.device import finite


class DeviceReplay(NamedTuple):
    """The replay's state carried from one step to the next (all on the device).

    Attributes:
      buffer: flashbax buffer state (items ``[1, capacity, ...]``).
      bad: ``[]`` int32 negative or non-finite priorities skipped so far.
      size: ``[]`` int32 items held (``min(inserts, capacity)``).
      inserted: ``[]`` int32 items inserted so far modulo ``Replay.id_period``.
    """

    buffer: Any
    bad: jax.Array
    size: jax.Array
    inserted: jax.Array


def updates_due(inserted: int, spec: ReplaySpec) -> int:
    """``learn`` calls due once ``inserted`` items are in a fresh replay: 0 below
    ``min_fill``, then ``ceil((inserted - min_fill) * replay_ratio / batch_size)``, the
    formula of :func:`~jaxsrl.workers.learner.replay_setup.planned_updates`."""
    if inserted < spec.min_fill:
        return 0
    return max(0, math.ceil((inserted - spec.min_fill) * spec.replay_ratio / spec.batch_size))


def check_replay(spec: ReplaySpec, items_per_step: int, num_devices: int) -> None:
    """Raise ``ValueError`` if the step cannot run: ``items_per_step`` (``N * T``) above
    the replay's capacity (one step would overwrite its own items), or a replay batch
    not divisible by ``num_devices``."""
    if items_per_step > spec.capacity:
        raise ValueError(f"batch_segments * segment_length = {items_per_step} items per step "
                         f"exceed the replay capacity {spec.capacity}: lower batch_segments "
                         "or segment_length, or raise the agent's capacity")
    if spec.batch_size % num_devices:
        raise ValueError(f"replay batch_size={spec.batch_size} is not divisible by the "
                         f"{num_devices} local devices")


def max_updates(items_per_step: int, spec: ReplaySpec) -> int:
    """The most learn calls :func:`updates_due` can add in one step of
    ``items_per_step`` items: ``ceil(items_per_step * replay_ratio / batch_size)``
    (``ceil(x + y) <= ceil(x) + ceil(y)``), the scan length of the step."""
    return max(1, math.ceil(items_per_step * spec.replay_ratio / spec.batch_size))


def empty_replay(replay: Replay, sharding: jax.sharding.Sharding | None = None) -> DeviceReplay:
    """An empty :class:`DeviceReplay` of ``replay``'s structure, made where ``sharding``
    puts it (default: ``replay``'s device; the buffer is never copied from the host)."""
    state = replay.empty_state(sharding)
    where = jax.tree.leaves(state)[0].sharding
    zero = lambda: jax.device_put(np.zeros((), np.int32), where)  # noqa: E731 (one buffer each: the step donates them)
    return DeviceReplay(state, zero(), zero(), zero())


def make_offpolicy_step(rollout: Callable, fns: AgentFns, replay: Replay,
                        planned_updates: int, items_per_step: int,
                        mesh: Mesh | None = None) -> tuple[Callable, int]:
    """``(step, K)``: the compiled off-policy step's function and its scan length.

    ``step(state, env_carry, replay_state, rng, version, todo) -> (state, env_carry,
    replay_state, rng, metrics, stats, health)``:

    - ``rng`` is split into ``(rng, k_rollout, k_learn)``; ``k_learn`` into ``K`` keys,
      key ``i`` into ``(k_sample, k_update)`` for update ``i``;
    - the rollout acts with ``state.params`` at policy ``version`` (``[]`` int32: learn
      calls so far); all ``N * T`` items of ``to_items`` are inserted *before* learning;
    - updates ``i < todo`` (``[]`` int32, ``0 <= todo <= K``) run in order: sample at
      ``beta = beta_schedule(importance_exponent, planned_updates)(version + i)``,
      ``learn(state, batch, k_update)``, ``set_priorities`` (prioritised replay);
    - ``metrics``: the agent's metrics averaged over the updates run (zeros if none),
      ``replay/staleness_mean`` / ``replay/staleness_max`` of the sampled items (learn
      calls since they were collected), ``replay/bad_priorities``, and with prioritised
      replay ``replay/priority_mean`` / ``replay/priority_max`` (``p^alpha`` over held
      items); ``stats`` the rollout's
      :class:`~jaxsrl.workers.device.rollout.EpisodeStats`;
    - non-finite values (:mod:`~jaxsrl.workers.device.finite`): a trajectory holding NaN
      or Inf is not inserted and no update runs on that step; an update whose new state
      holds one is not kept (nor are its priorities); ``health`` counts both
      (``skipped``: the ``todo`` learn calls not kept).

    Args:
      rollout: :func:`~jaxsrl.workers.device.rollout.make_rollout`'s function.
      fns: the off-policy agent's functions (``replay``, ``to_items`` set).
      replay: a :class:`Replay` built for ``to_items``' items; only its pure bodies
        are used (its own host-side state is not touched).
      planned_updates: the run's planned learn calls (horizon of the beta schedule).
      items_per_step: ``N * T``, items ``to_items`` builds from one rollout.
      mesh: constrain each sampled batch to be split over these devices (data-parallel
        ``learn``); ``None``: no constraint (one device).

    Raises:
      ValueError: ``fns`` is not off-policy, ``items_per_step`` exceeds the replay's
        capacity (one step would overwrite its own items), or the batch size is not
        divisible by ``mesh``'s devices.
    """
    if fns.replay is None or fns.to_items is None:
        raise ValueError("make_offpolicy_step needs an off-policy agent (AgentFns.replay "
                         "and AgentFns.to_items set)")
    spec = fns.replay
    check_replay(spec, items_per_step, 1 if mesh is None else mesh.size)
    K = max_updates(items_per_step, spec)
    beta = beta_schedule(spec.importance_exponent, planned_updates)
    period, capacity = replay.id_period, spec.capacity
    split = (lambda b: jax.lax.with_sharding_constraint(b, devices.batch_sharded(mesh))) \
        if mesh is not None else (lambda b: b)

    def update(args, i, key, version):
        state, r = args
        k_sample, k_update = jax.random.split(key)
        batch, ids = replay.sample_fn(r.buffer, k_sample, beta(version + i), r.size, r.inserted)
        new_state, metrics, priorities = fns.learn(state, split(batch), k_update)
        ok = finite.all_finite(new_state)  # a non-finite result is not kept
        state = finite.keep_if(ok, new_state, state)
        age = (version + i - policy_version_of(batch.items)).astype(jnp.float32)
        if spec.prioritised:
            def write(r):
                buf, bad = replay.set_priorities_fn(r.buffer, r.bad, ids, priorities, r.size,
                                                    r.inserted)
                return r._replace(buffer=buf, bad=bad)
            r = jax.lax.cond(ok, write, lambda r: r, r)
        return (state, r), (metrics, jnp.mean(age), jnp.max(age), ~ok)

    def step(state, env_carry, r, rng, version, todo):
        rng, k_rollout, k_learn = jax.random.split(rng, 3)
        env_carry, traj, stats = rollout(state.params, env_carry, k_rollout, version)
        items, _ = fns.to_items(traj)
        bad = finite.bad_rows(traj)
        clean = bad["any"] == 0  # a trajectory with NaN or Inf is not inserted
        r = jax.lax.cond(clean, lambda r: DeviceReplay(
            replay.add_fn(r.buffer, items), r.bad,
            jnp.minimum(r.size + items_per_step, capacity).astype(jnp.int32),
            ((r.inserted + items_per_step) % period).astype(jnp.int32)), lambda r: r, r)
        shapes = jax.eval_shape(lambda a: update(a, 0, k_learn, version)[1], (state, r))
        skipped = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        def body(args, xs):
            i, key = xs
            return jax.lax.cond((i < todo) & clean, lambda a: update(a, i, key, version),
                                lambda a: (a, skipped), args)

        (state, r), (metrics, age_mean, age_max, not_kept) = jax.lax.scan(
            body, (state, r), (jnp.arange(K, dtype=jnp.int32), jax.random.split(k_learn, K)))
        ran = jnp.arange(K) < todo
        count = jnp.maximum(todo, 1).astype(jnp.float32)
        mean = lambda m: (jnp.sum(jnp.where(ran, m.astype(jnp.float32), 0.0)) / count)
        out = {k: mean(v) for k, v in metrics.items()}
        out["replay/staleness_mean"] = mean(age_mean)
        out["replay/staleness_max"] = jnp.max(jnp.where(ran, age_max, 0.0))
        out["replay/bad_priorities"] = r.bad.astype(jnp.float32)
        if spec.prioritised:
            p_mean, p_max = replay.priority_stats_fn(r.buffer, r.size)
            out["replay/priority_mean"], out["replay/priority_max"] = p_mean, p_max
        ran_not_kept = jnp.sum(ran & not_kept) + jnp.where(clean, 0, todo)
        return state, env_carry, r, rng, out, stats, finite.health(bad, ran_not_kept)

    return step, K


def jit_offpolicy_step(step: Callable, mesh: Mesh) -> Callable:
    """``step`` jitted over ``mesh``: the environment carry (``[N, ...]`` leaves) split
    along its leading axis, learner state and replay replicated (see the module doc);
    learner state, environment carry and replay donated (updated in place). ``N`` must
    be divisible by ``mesh.size``."""
    rep, shard = devices.replicated(mesh), devices.batch_sharded(mesh)
    return jax.jit(step, in_shardings=(rep, shard, rep, rep, rep, rep),
                   out_shardings=(rep, shard, rep, rep, rep, rep, rep), donate_argnums=(0, 1, 2))
