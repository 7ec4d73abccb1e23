"""A population's fused step on device actors: the members' learner states stacked
along a leading member axis and the fused rollout-and-learn step
(:func:`jaxsrl.workers.device.fused.make_fused_step`) ``vmap``\\ ped over it, so one
compiled call trains every member (the PureJaxRL / Stoix layout). A member's
hyperparameters are leaves of its learner state (``state.hyper``: ``{name: []
float32}``, stacked ``[M]``), so members train with different values without a
recompile; population-based training changes them by writing one member's slice
(:func:`set_member`).

Layout: every leaf of the stacked learner state, RNG key and policy version has a
leading ``[M]`` axis; the stacked environment carry is ``[M, N, ...]`` and is split
over the local devices along its environment axis (``N``), the rest replicated, as
:func:`~jaxsrl.workers.device.fused.jit_fused_step` places one member's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxsrl.parallel import devices


def make_population_step(step: Callable) -> Callable:
    """``step`` (one member's ``(state, env_carry, rng, version) -> (state, env_carry,
    rng, metrics, stats, health)``) mapped over a leading member axis of all its arguments and
    results: member ``i``'s results are ``step`` of member ``i``'s arguments only."""
    return jax.vmap(step, in_axes=(0, 0, 0, 0), out_axes=0)


def member_env_sharding(mesh: Mesh) -> NamedSharding:
    """The members' stacked environment carries (``[M, N, ...]``): ``N`` split over
    ``mesh``'s ``data`` axis."""
    return NamedSharding(mesh, PartitionSpec(None, devices.AXIS))


def jit_population_step(step: Callable, mesh: Mesh) -> Callable:
    """A :func:`make_population_step` jitted over ``mesh``: environment carries split
    along their environment axis, everything else replicated; the stacked learner state
    and environment carry donated. ``N`` must be divisible by ``mesh.size``."""
    rep, shard = devices.replicated(mesh), member_env_sharding(mesh)
    return jax.jit(step, in_shardings=(rep, shard, rep, rep),
                   out_shardings=(rep, shard, rep, rep, rep, rep), donate_argnums=(0, 1))


def stack(trees: Sequence[Any]) -> Any:
    """Member pytrees of one structure stacked along a new leading axis (``[M, ...]``)."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def member(tree: Any, i: int) -> Any:
    """Member ``i``'s slice of a stacked pytree (every leaf ``[M, ...] -> [...]``)."""
    return _take(tree, jnp.int32(i))


def set_member(tree: Any, i: int, value: Any) -> Any:
    """``tree`` with member ``i``'s slice replaced by ``value`` (same structure, shapes
    and dtypes as :func:`member` gives); the other members' slices are unchanged.

    Raises:
      ValueError: ``value`` of another structure than a member of ``tree``.
    """
    if jax.tree.structure(value) != jax.tree.structure(tree):
        raise ValueError(f"set_member: a state of structure {jax.tree.structure(value)} does "
                         f"not fit the population's {jax.tree.structure(tree)}")
    return _put(tree, jnp.int32(i), value)


# One compiled program per state structure (the index is traced), not one per leaf.
_take = jax.jit(lambda tree, i: jax.tree.map(lambda x: x[i], tree))
_put = jax.jit(lambda tree, i, value: jax.tree.map(
    lambda x, v: x.at[i].set(jnp.asarray(v, x.dtype)), tree, value))
