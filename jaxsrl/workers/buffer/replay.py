"""A replay buffer on one device over flashbax 0.1.3: uniform or proportional prioritised.

Items are pytrees of ``[N, ...]`` leaves, as ``AgentFns.to_items`` builds them; the
buffer holds the newest ``spec.capacity`` of them in a ring (oldest overwritten first).
Proportional prioritised replay follows Schaul et al. 2016 ("Prioritized Experience
Replay"): ``P(i) = p_i^alpha / sum_k p_k^alpha`` (Eq. 1), new items at the largest
priority seen so far (Algorithm 1, line 6; 1 before any is set), importance weights
``w_i = (N P(i))^-beta / max_j w_j`` over the sampled batch (Sec. 3.4, Algorithm 1 line
10), ``beta`` annealed linearly to 1 (:func:`beta_schedule`).

Design choices:

- **Variable add sizes.** flashbax compiles one ``add`` per batch shape, so :meth:`Replay.add`
  writes the valid rows as power-of-two chunks of at most ``max_add_chunk`` (1000 rows:
  512 + 256 + 128 + 64 + 32 + 8): at most ``log2(max_add_chunk) + 1`` shapes are ever
  compiled (all of them by :meth:`Replay.warmup`). Padding to a fixed size with
  zero-priority rows was rejected: flashbax writes every row it is given, so padding
  would take ring slots (overwriting real items early), would be drawn by uniform
  replay, and even at priority 0 could be drawn by float rounding in the sum tree.
- **alpha is applied once, by flashbax**: its ``set_priorities`` stores ``p^alpha`` in the
  sum tree and new items get the largest stored value (``(max p)^alpha``), so
  :meth:`Replay.set_priorities` takes raw priorities (e.g. ``|TD error| + eps``).
- **flashbax 0.1.3 bug worked around**: its prioritised add gives new items
  ``floor(max priority)`` (a ``full_like`` of the integer index array); :meth:`Replay.add`
  then sets the new slots to the exact maximum.
- **Item ids, not slots**: :meth:`Replay.sample` returns ids (insertion numbers modulo a
  multiple of the capacity near ``2^30``); :meth:`Replay.set_priorities` drops ids whose
  item was overwritten since it was sampled (actors keep inserting while ``learn`` runs)
  instead of giving a new item an old item's priority. flashbax's own int32 insertion
  counter is kept below ``2^30`` the same way, so a run may insert any number of items.
"""

from __future__ import annotations

from typing import Any, Callable

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np
from flashbax.buffers.prioritised_trajectory_buffer import SET_BATCH_FN

from jaxsrl.core.agent import ReplayBatch, ReplaySpec

ID_PERIOD = 2**30
"""Item ids count insertions modulo the largest multiple of the capacity <= this."""


def beta_schedule(beta0: float, planned_updates: int) -> Callable[[Any], Any]:
    """``beta(update)``: linear from ``beta0`` at update 0 to 1 at ``planned_updates``, then 1.
    ``update`` an int gives a float; a JAX array (e.g. traced) a float32 array.

    Schaul et al. 2016, Sec. 3.4 (importance-sampling exponent annealed to 1 by the end).

    Raises:
      ValueError: ``beta0`` outside [0, 1] or ``planned_updates`` < 1.
    """
    if not 0.0 <= beta0 <= 1.0:
        raise ValueError(f"beta0 must be in [0, 1], got {beta0}")
    if planned_updates < 1:
        raise ValueError(f"planned_updates must be >= 1, got {planned_updates}")

    def beta(update):
        if isinstance(update, jax.Array):  # traced (the device actors' step): float32 array
            return beta0 + (1.0 - beta0) * jnp.clip(update / planned_updates, 0.0, 1.0)
        return beta0 + (1.0 - beta0) * min(max(update, 0) / planned_updates, 1.0)

    return beta


def _chunk_sizes(n: int, largest: int) -> list[int]:
    """``n`` as a list of powers of two, each <= ``largest`` (itself a power of two)."""
    out = []
    while n:
        out.append(largest if n >= largest else 1 << (n.bit_length() - 1))
        n -= out[-1]
    return out


def _leaf_spec(x) -> jax.ShapeDtypeStruct:
    """Shape and stored dtype of one example leaf (float64 is float32 without x64)."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise TypeError(f"example_item leaves must be arrays (shape and dtype), got {x!r}")
    return jax.ShapeDtypeStruct(tuple(x.shape), jax.dtypes.canonicalize_dtype(x.dtype))


def _check_spec(spec: ReplaySpec) -> None:
    if spec.capacity < 1:
        raise ValueError(f"ReplaySpec.capacity must be >= 1, got {spec.capacity}")
    if not 1 <= spec.batch_size <= spec.capacity:
        raise ValueError(f"ReplaySpec.batch_size must be in [1, capacity={spec.capacity}], "
                         f"got {spec.batch_size}")
    if not 0.0 <= spec.priority_exponent <= 1.0:
        raise ValueError(f"ReplaySpec.priority_exponent must be in [0, 1], "
                         f"got {spec.priority_exponent}")
    if not 0.0 <= spec.importance_exponent <= 1.0:
        raise ValueError(f"ReplaySpec.importance_exponent must be in [0, 1], "
                         f"got {spec.importance_exponent}")


class Replay:
    """Replay buffer of one device: :meth:`add`, :meth:`sample`, :meth:`set_priorities`.

    Args:
      spec: capacity, batch size, uniform or prioritised, alpha and beta.
      example_item: one item (leaves without the leading ``N`` axis; arrays or
        ``jax.ShapeDtypeStruct``), e.g. ``jax.tree.map(lambda x: x[0], items)``.
      max_add_chunk: largest rows per flashbax add (rounded down to a power of two and
        to the capacity).
      device: where the buffer lives (default: the first device).

    Attributes:
      inserts: items written so far (valid rows, at most ``capacity`` per :meth:`add`).
      samples: items sampled so far (``batch_size`` per :meth:`sample`).

    Not thread-safe: one thread (the buffer worker's) calls it.

    Raises:
      ValueError: a bad ``spec`` value or ``max_add_chunk`` < 1. TypeError: an
        ``example_item`` leaf without shape and dtype.
    """

    def __init__(self, spec: ReplaySpec, example_item: Any, *, max_add_chunk: int = 1024,
                 device: jax.Device | None = None):
        _check_spec(spec)
        if max_add_chunk < 1:
            raise ValueError(f"max_add_chunk must be >= 1, got {max_add_chunk}")
        self.spec, self.capacity = spec, spec.capacity
        self._largest = 1 << (min(max_add_chunk, spec.capacity).bit_length() - 1)
        self._period = spec.capacity * max(1, ID_PERIOD // spec.capacity)
        self._specs = jax.tree.map(_leaf_spec, example_item)
        self._treedef = jax.tree.structure(self._specs)
        self._device = device or jax.devices()[0]
        backend = self._device.platform if self._device.platform in SET_BATCH_FN else "cpu"
        if spec.prioritised:
            self._buffer = fbx.make_prioritised_item_buffer(
                max_length=spec.capacity, min_length=1, sample_batch_size=spec.batch_size,
                add_batches=True, priority_exponent=spec.priority_exponent, device=backend)
            self._set_leaves = SET_BATCH_FN[backend]
        else:
            self._buffer = fbx.make_item_buffer(
                max_length=spec.capacity, min_length=1, sample_batch_size=spec.batch_size,
                add_batches=True)
        self._add = jax.jit(self.add_fn, donate_argnums=0)
        self._sample = jax.jit(self.sample_fn)
        self._set = jax.jit(self.set_priorities_fn, donate_argnums=(0, 1))
        self._priority_stats = jax.jit(self.priority_stats_fn)
        self._empty = jax.jit(self._init_fn,
                              out_shardings=jax.sharding.SingleDeviceSharding(self._device))
        self._reset()

    def empty_state(self, sharding: jax.sharding.Sharding | None = None) -> Any:
        """A fresh, empty flashbax buffer state (items ``[1, capacity, ...]``) made by one
        compiled call directly where ``sharding`` puts it (default: this buffer's device),
        never as a host copy; plain (not weakly typed) arrays, as every jitted call returns."""
        if sharding is None:
            return self._empty()
        return jax.jit(self._init_fn, out_shardings=sharding)()

    def _init_fn(self) -> Any:
        example = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), self._specs)
        return jax.tree.map(lambda x: x.astype(x.dtype), self._buffer.init(example))

    def _reset(self) -> None:
        self._held = None  # the device buffer, made at first use (see _state)
        self._bad = jax.device_put(np.int32(0), self._device)
        self.inserts, self.samples = 0, 0

    @property
    def _state(self) -> Any:
        """The flashbax state on the device, made at first use: a :class:`Replay` whose
        pure bodies are traced elsewhere (the device actors' step) never holds one."""
        if self._held is None:
            self._held = self.empty_state()
        return self._held

    @_state.setter
    def _state(self, state: Any) -> None:
        self._held = state

    @property
    def id_period(self) -> int:
        """Ids count insertions modulo this (a multiple of the capacity <= :data:`ID_PERIOD`)."""
        return self._period

    @property
    def size(self) -> int:
        """Items held now: ``min(inserts, capacity)``."""
        return min(self.inserts, self.capacity)

    # -- pure bodies: jitted by the methods below, and traced inside the device actors'
    # off-policy step (jaxsrl/workers/device/offpolicy.py) on a buffer state it carries
    def add_fn(self, state, chunk):
        """``state`` with ``chunk`` (``[k, ...]`` leaves, ``1 <= k <= capacity``) written
        at the ring's write index; prioritised: the new slots at the largest priority."""
        write, c = state.current_index, self.capacity
        state = self._buffer.add(state, chunk)
        if self.spec.prioritised:
            k = jax.tree.leaves(chunk)[0].shape[0]
            tree = state.sum_tree_state
            tree = self._set_leaves(tree, (write + jnp.arange(k)) % c,
                                    jnp.full((k,), tree.max_recorded_priority))
            running = state.running_index  # same slot mod c, still >= c ("full")
            running = jnp.where(running >= ID_PERIOD, c + running % c, running)
            state = state.replace(sum_tree_state=tree, running_index=running)
        return state

    def sample_fn(self, state, key, beta, size, inserted):
        """``(ReplayBatch, ids)`` of ``batch_size`` items (see :meth:`sample`) from
        ``state`` holding ``size`` (``[]`` int32, >= 1) items, ``inserted`` (``[]`` int32)
        insertions so far modulo the id period; ``beta`` ``[]`` float32."""
        c, b = self.capacity, self.spec.batch_size
        if self.spec.prioritised:
            s = self._buffer.sample(state, key)  # stratified over the sum tree
            slots, probs = s.indices, s.probabilities
            # rounding in the sum tree can (very rarely) reach an empty or zero-priority
            # leaf; such a pick is replaced by the batch's most probable one
            best = jnp.argmax(probs)
            slots = jnp.where(probs > 0, slots, slots[best])
            probs = jnp.where(probs > 0, probs, probs[best])
            w = (size * probs) ** (-beta)  # Schaul et al. 2016, Sec. 3.4
            weights = (w / jnp.max(w)).astype(jnp.float32)
        else:
            slots = jax.random.randint(key, (b,), 0, size)
            weights = jnp.ones((b,), jnp.float32)
        items = jax.tree.map(lambda x: x[0, slots], state.experience)
        age = (state.current_index - 1 - slots) % c  # 0 = newest
        ids = (inserted - 1 - age) % self._period
        return ReplayBatch(items=items, weights=weights), ids.astype(jnp.int32)

    def set_priorities_fn(self, state, bad, ids, priorities, size, inserted):
        """``(state, bad)`` with the raw ``priorities`` of the items ``ids`` still held
        set (see :meth:`set_priorities`); ``bad`` (``[]`` int32) counts the negative or
        non-finite ones skipped. Prioritised buffers only."""
        p = priorities.astype(jnp.float32)
        good = jnp.isfinite(p) & (p >= 0)
        keep = good & ((inserted - 1 - ids) % self._period < size)  # not overwritten since
        out_of_range = 2 ** (state.sum_tree_state.tree_depth + 1)  # flashbax drops these
        slots = jnp.where(keep, ids % self.capacity, out_of_range)
        state = self._buffer.set_priorities(state, slots, jnp.where(keep, p, 0.0))
        return state, bad + jnp.sum(~good).astype(jnp.int32)

    def priority_stats_fn(self, state, size):
        """``(mean, max)`` of ``p^alpha`` over the ``size`` held items (prioritised only)."""
        tree = state.sum_tree_state
        first = 2**tree.tree_depth - 1
        leaves = tree.nodes[first:first + self.capacity]  # p^alpha per slot
        leaves = jnp.where(jnp.arange(self.capacity) < size, leaves, 0.0)
        return jnp.sum(leaves) / jnp.maximum(size, 1), jnp.max(leaves)

    # -- public ---------------------------------------------------------------------------
    def add(self, items: Any, valid: Any = None) -> int:
        """Write the valid rows of ``items`` (host side), newest last.

        Args:
          items: pytree like ``example_item`` with ``[N, ...]`` leaves (host or device
            arrays, moved to the host), dtypes equal to ``example_item``'s.
          valid: ``[N]`` bool, rows to keep (default: all). Invalid rows are never written.

        Returns:
          Items written: the valid rows, or the last ``capacity`` of them if more.

        Raises:
          ValueError: a structure, shape or ``valid`` mismatch. TypeError: a dtype mismatch.
        """
        leaves, treedef = jax.tree_util.tree_flatten_with_path(items)
        if jax.tree.structure(items) != self._treedef:
            raise ValueError(f"add: items have structure {jax.tree.structure(items)}, "
                             f"expected {self._treedef}")
        host = [np.asarray(x) for _, x in leaves]
        n = host[0].shape[0] if host[0].ndim else -1
        for (path, _), x, s in zip(leaves, host, jax.tree.leaves(self._specs)):
            name = jax.tree_util.keystr(path)
            if x.shape != (n, *s.shape):
                raise ValueError(f"add: leaf {name} has shape {x.shape}, expected [N, "
                                 f"*{s.shape}] with the same N for every leaf")
            if x.dtype != s.dtype:
                raise TypeError(f"add: leaf {name} has dtype {x.dtype}, expected {s.dtype}")
        mask = np.ones(n, bool) if valid is None else np.asarray(valid)
        if mask.dtype != bool or mask.shape != (n,):
            raise ValueError(f"add: valid must be bool [{n}], got {mask.dtype} {mask.shape}")
        rows = np.flatnonzero(mask)[-self.capacity:]
        if len(rows) < n:
            host = [x[rows] for x in host]
        start = 0
        for k in _chunk_sizes(len(rows), self._largest):
            chunk = self._treedef.unflatten([x[start:start + k] for x in host])
            self._state = self._add(self._state, chunk)
            start += k
        self.inserts += len(rows)
        return len(rows)

    def sample(self, rng: jax.Array, beta: float | None = None) -> tuple[ReplayBatch, jax.Array]:
        """Draw ``batch_size`` items (with replacement), proportionally or uniformly.

        Args:
          rng: PRNG key.
          beta: importance exponent (default ``spec.importance_exponent``); a traced
            value, so a schedule does not recompile.

        Returns:
          ``(batch, ids)``: ``batch.items`` ``[batch_size, ...]`` leaves, ``batch.weights``
          ``[batch_size]`` float32 (ones for uniform replay); ``ids`` ``[batch_size]``
          int32 for :meth:`set_priorities`: each item's insertion number (0 for the
          first item ever written) modulo the largest multiple of ``capacity`` <=
          :data:`ID_PERIOD`.

        Raises:
          ValueError: the buffer is empty, or ``beta`` outside [0, 1].
        """
        if self.size == 0:
            raise ValueError("sample: the buffer is empty (add items first)")
        beta = self.spec.importance_exponent if beta is None else beta
        if isinstance(beta, (int, float)) and not 0.0 <= beta <= 1.0:
            raise ValueError(f"sample: beta must be in [0, 1], got {beta}")
        rng, beta = self._put(rng, None), self._put(beta, np.float32)
        out = self._sample(self._state, rng, beta, self.size, self.inserts % self._period)
        self.samples += self.spec.batch_size
        return out

    def set_priorities(self, ids: jax.Array, priorities: jax.Array) -> None:
        """Set raw priorities ``p_i`` (alpha is applied inside); a no-op for uniform replay.

        Items overwritten since they were sampled are skipped. A priority of 0 means the
        item is never drawn again (add a small epsilon to ``|TD error|``; with every held
        item at 0 the weights are NaN); negative or
        non-finite entries are skipped and counted (``bad_priorities``).

        Args:
          ids: ``[K]`` int32 from :meth:`sample`.
          priorities: ``[K]`` float, >= 0.

        Raises:
          ValueError: ``ids`` and ``priorities`` are not both ``[K]``.
        """
        if np.ndim(ids) != 1 or np.shape(ids) != np.shape(priorities):
            raise ValueError(f"set_priorities: ids {np.shape(ids)} and priorities "
                             f"{np.shape(priorities)} must both be [K]")
        if self.spec.prioritised:
            ids, priorities = self._put(ids, np.int32), self._put(priorities, np.float32)
            self._state, self._bad = self._set(self._state, self._bad, ids, priorities,
                                               self.size, self.inserts % self._period)

    def _put(self, x, dtype):
        """``x`` as a ``dtype`` array committed to the buffer's device: host and device
        inputs, committed or not, then hit the same compiled function."""
        if dtype is not None:
            x = x.astype(dtype) if isinstance(x, jax.Array) else np.asarray(x, dtype)
        return jax.device_put(x, self._device)

    def priority_stats(self) -> dict[str, float]:
        """``{"priority_mean", "priority_max"}`` of ``p_i^alpha`` over held items ({} if uniform)."""
        if not self.spec.prioritised:
            return {}
        mean, mx = jax.device_get(self._priority_stats(self._state, self.size))
        return {"priority_mean": float(mean), "priority_max": float(mx)}

    def block_until_ready(self) -> None:
        """Wait until every queued add or set on the device has finished (for timing)."""
        jax.block_until_ready(self._state)

    @property
    def bad_priorities(self) -> int:
        """Negative or non-finite priorities given to :meth:`set_priorities` so far."""
        return int(self._bad)

    def warmup(self) -> None:
        """Compile every add chunk shape, sample and set_priorities now (empty buffer only).

        Raises:
          ValueError: the buffer already holds items.
        """
        if self.inserts:
            raise ValueError(f"warmup: the buffer already holds {self.inserts} items")
        k = 1
        while k <= self._largest:
            self.add(jax.tree.map(lambda s: np.zeros((k, *s.shape), s.dtype), self._specs))
            k *= 2
        batch, ids = self.sample(jax.random.PRNGKey(0))
        self.set_priorities(ids, batch.weights)
        del batch, ids
        self._reset()  # frees the device buffer; the next use makes a fresh one

    def _as_dict(self, state, item_leaf) -> dict:
        d = {"capacity": np.int64(self.capacity), "prioritised": np.bool_(self.spec.prioritised),
             "priority_exponent": np.float32(self.spec.priority_exponent),
             "inserts": np.int64(self.inserts), "samples": np.int64(self.samples),
             "items": jax.tree.map(item_leaf, state.experience),
             "write_index": state.current_index, "is_full": state.is_full}
        if self.spec.prioritised:
            d.update(priority_nodes=state.sum_tree_state.nodes,
                     max_priority=state.sum_tree_state.max_recorded_priority,
                     running_index=state.running_index, bad_priorities=self._bad)
        return d

    def state_dict(self) -> dict:
        """The buffer as a pytree of numpy arrays (items ``[capacity, ...]``), for checkpoints."""
        state = jax.device_get(self._state)
        return jax.tree.map(np.asarray, self._as_dict(state, lambda x: x[0]))

    def load_state_dict(self, d: dict) -> None:
        """Restore what :meth:`state_dict` returned (samples continue identically).

        Raises:
          ValueError: ``d`` comes from a buffer of another structure, capacity, mode,
            alpha or item shapes and dtypes.
        """
        like = self._as_dict(jax.eval_shape(self._init_fn),
                             lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype))
        if jax.tree.structure(d) != jax.tree.structure(like):
            raise ValueError(f"load_state_dict: structure {jax.tree.structure(d)} does not "
                             f"match this buffer's {jax.tree.structure(like)}")
        for (path, v), w in zip(jax.tree_util.tree_flatten_with_path(d)[0], jax.tree.leaves(like)):
            v = np.asarray(v)
            if v.shape != w.shape or v.dtype != w.dtype:
                raise ValueError(f"load_state_dict: {jax.tree_util.keystr(path)} is {v.dtype}"
                                 f"{list(v.shape)}, expected {w.dtype}{list(w.shape)}")
        for key in ("capacity", "prioritised", "priority_exponent"):
            if d[key] != like[key]:
                raise ValueError(f"load_state_dict: saved {key}={d[key]}, this buffer has "
                                 f"{like[key]}")
        state = self._state.replace(experience=jax.tree.map(lambda x: np.asarray(x)[None],
                                                            d["items"]),
                                    current_index=d["write_index"], is_full=d["is_full"])
        if self.spec.prioritised:
            tree = state.sum_tree_state.replace(nodes=d["priority_nodes"],
                                                max_recorded_priority=d["max_priority"])
            state = state.replace(sum_tree_state=tree, running_index=d["running_index"])
            self._bad = jax.device_put(np.asarray(d["bad_priorities"]), self._device)
        self._state = jax.device_put(jax.tree.map(np.asarray, state), self._device)
        self.inserts, self.samples = int(d["inserts"]), int(d["samples"])
