"""Sparse final observations on the sample stream: what the learner rebuilds equals the
old dense path, on random truncation patterns, and bootstrapping cannot tell."""

import gymnasium
import jax
import numpy as np
import pytest

from agents.returns import bootstrap_values
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.streams import wire
from jaxsrl.streams.segment import (FINAL_INDEX, dense_segment, pack_final_obs, segment_schema,
                                    to_trajectory)
from jaxsrl.streams.segment_gate import SegmentGate

T = 6
SPACES = {
    "box": gymnasium.spaces.Box(-1, 1, (3,), np.float32),
    "dict": gymnasium.spaces.Dict({"pos": gymnasium.spaces.Box(-1, 1, (2, 2), np.float32),
                                   "grid": gymnasium.spaces.Box(0, 255, (4,), np.uint8)}),
}


def _segment(space, rows, p_trunc, rng, junk=False):
    """Dense segment arrays as the old actor sent them: final obs where truncated, zeros
    elsewhere (or, with ``junk``, arbitrary values elsewhere: the actor's stale buffer)."""
    schema = segment_schema(space, gymnasium.spaces.Discrete(3), T)
    out = {}
    for name, spec in schema.items():
        shape = (rows,) + tuple(spec.shape[1:])
        out[name] = (rng.integers(0, 255, shape) if spec.dtype == "uint8"
                     else rng.standard_normal(shape)).astype(spec.dtype)
    out["truncated"] = rng.random((rows, T)) < p_trunc
    out["terminated"] = ~out["truncated"] & (rng.random((rows, T)) < 0.2)
    out["action"] = rng.integers(0, 3, (rows, T)).astype(np.int32)
    out["version"] = np.zeros((rows, T), np.int32)
    for name in schema:
        if name.startswith("final_obs") and not junk:
            mask = out["truncated"].reshape((rows, T) + (1,) * (out[name].ndim - 2))
            out[name] = np.where(mask, out[name], 0).astype(out[name].dtype)
    return schema, out


def _through_the_gate(schema, arrays):
    gate = SegmentGate(schema, T, 64, None, MetricsAccumulator())
    frames = wire.encode("segment", pack_final_obs(arrays), {"actor": 0, "env_steps": 0})
    admitted = gate.admit([bytes(f) for f in frames])
    assert admitted is not None, gate.drops.recent()
    return admitted[0].arrays


@pytest.mark.parametrize("space_name", list(SPACES))
@pytest.mark.parametrize("p_trunc", [0.0, 0.15, 0.5, 1.0])
def test_round_trip_equals_the_dense_path(space_name, p_trunc):
    space = SPACES[space_name]
    rng = np.random.default_rng(int(p_trunc * 100) + len(space_name))
    for rows in (1, 3, 8):
        schema, arrays = _segment(space, rows, p_trunc, rng)
        old = to_trajectory(arrays, space)  # the learner's trajectory of a dense segment
        new = to_trajectory(_through_the_gate(schema, arrays), space)
        for a, b in zip(jax.tree.leaves(old), jax.tree.leaves(new), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)


def test_sparse_is_smaller_and_holds_only_truncated_rows():
    rng = np.random.default_rng(0)
    schema, arrays = _segment(SPACES["box"], 4, 0.1, rng)
    packed = pack_final_obs(arrays)
    k = int(arrays["truncated"].sum())
    assert packed["final_obs"].shape == (k, 3)
    np.testing.assert_array_equal(packed[FINAL_INDEX], np.flatnonzero(arrays["truncated"]))
    dense_bytes = sum(len(f) for f in wire.encode("segment", arrays, {}))
    sparse_bytes = sum(len(f) for f in wire.encode("segment", packed, {}))
    assert sparse_bytes < dense_bytes


def test_bootstrap_reads_final_obs_only_where_truncated():
    """Values elsewhere in final_obs (junk in the dense path, zeros after the rebuild) do
    not change ``bootstrap_values``: the learner may rebuild them as anything."""
    rng = np.random.default_rng(1)
    space = SPACES["box"]
    schema, arrays = _segment(space, 5, 0.3, rng, junk=True)
    old = to_trajectory(arrays, space)
    new = to_trajectory(_through_the_gate(schema, arrays), space)
    value = lambda obs: obs.sum(-1)  # noqa: E731  (any function of the observation)
    np.testing.assert_array_equal(old.obs, new.obs)
    v_obs = value(old.obs)  # [B, T + 1]
    a = bootstrap_values(v_obs.T, value(old.final_obs).T, old.truncated.T)
    b = bootstrap_values(v_obs.T, value(new.final_obs).T, new.truncated.T)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(old.final_obs, new.final_obs)  # the junk really differed


def test_dense_encoding_still_accepted_and_bad_index_refused():
    rng = np.random.default_rng(2)
    schema, arrays = _segment(SPACES["box"], 2, 0.5, rng)
    dense, n = dense_segment(arrays, schema)
    assert n == 2 and dense["final_obs"].shape == (2, T, 3)
    packed = pack_final_obs(arrays)
    assert packed[FINAL_INDEX].size >= 2  # reversing changes the order
    with pytest.raises(wire.WireError, match="not the .* truncated steps"):
        dense_segment({**packed, FINAL_INDEX: packed[FINAL_INDEX][::-1].copy()}, schema)
