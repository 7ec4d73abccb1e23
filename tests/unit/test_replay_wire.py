"""Messages of the replay stream (jaxsrl/streams/replay_wire.py) and the buffer process's
spec (jaxsrl/workers/buffer/spec.py): round trips and one-line refusals."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxsrl.streams import replay_wire, wire
from jaxsrl.workers.buffer.spec import BufferProcessSpec

SPEC = {"obs": jax.ShapeDtypeStruct((3,), np.float32), "action": jax.ShapeDtypeStruct((), np.int32)}


def _batch(b=4):
    items = {"obs": np.arange(3 * b, dtype=np.float32).reshape(b, 3),
             "action": np.arange(b, dtype=np.int32)}
    return replay_wire.encode_batch(items, np.linspace(0.5, 1, b), np.arange(b) + 7,
                                    {"req": 3, "run": 9, "shard": 0})


def test_batch_round_trip():
    msg, items = replay_wire.decode_batch(_batch(), SPEC, 4)
    assert replay_wire.item_names(SPEC) == ["items/['action']", "items/['obs']"]
    np.testing.assert_array_equal(items["obs"], np.arange(12, dtype=np.float32).reshape(4, 3))
    assert items["action"].dtype == np.int32 and msg.arrays["ids"].tolist() == [7, 8, 9, 10]
    assert msg.arrays["weights"].dtype == np.float32 and msg.meta["req"] == 3


def test_batch_refusals():
    with pytest.raises(wire.WireError, match=r"shape \(4,\), expected \(8,\)"):
        replay_wire.decode_batch(_batch(), SPEC, 8)
    with pytest.raises(wire.WireError, match="missing arrays"):
        replay_wire.decode_batch(_batch(), {**SPEC, "reward": SPEC["action"]}, 4)
    frames = wire.encode(replay_wire.BATCH, {}, {"req": "3", "run": 9})
    with pytest.raises(wire.WireError, match="meta 'req'='3' is not an integer"):
        replay_wire.decode_batch(frames, SPEC, 4)
    with pytest.raises(wire.WireError, match="expected a 'replay_batch'"):
        replay_wire.decode_batch(wire.encode("segment", {}, {}), SPEC, 4)


def test_priorities_checks():
    ok = wire.decode(wire.encode(replay_wire.PRIORITIES, {
        "ids": np.arange(4, dtype=np.int32), "priorities": np.ones(4, np.float32)}, {}))
    ids, p = replay_wire.check_priorities(ok, 4)
    assert ids.tolist() == [0, 1, 2, 3] and p.tolist() == [1, 1, 1, 1]
    with pytest.raises(wire.WireError, match="at most 2"):
        replay_wire.check_priorities(ok, 2)
    bad = wire.decode(wire.encode(replay_wire.PRIORITIES, {
        "ids": np.arange(4, dtype=np.int64), "priorities": np.ones(4, np.float32)}, {}))
    with pytest.raises(wire.WireError, match="dtype int64, expected int32"):
        replay_wire.check_priorities(bad, 4)


def test_buffer_process_spec():
    base = {"name": "replay", "agent": "dqn", "env": "CartPole-v1", "planned_updates": 10,
            "segment_length": 8, "max_rows": 4, "capacity": 100, "min_fill": 10,
            "status_address": "tcp://127.0.0.1:1"}
    spec = BufferProcessSpec.from_dict(base)
    assert BufferProcessSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match=r"lacks \['capacity'\]"):
        BufferProcessSpec.from_dict({k: v for k, v in base.items() if k != "capacity"})
    with pytest.raises(ValueError, match=r"unknown keys \['colour'\]"):
        BufferProcessSpec.from_dict({**base, "colour": 1})
    with pytest.raises(ValueError, match="shard=2 is outside 0..1"):
        BufferProcessSpec.from_dict({**base, "shard": 2, "shards": 2})
    with pytest.raises(ValueError, match="min_fill=0 must be >= 1"):
        BufferProcessSpec.from_dict({**base, "min_fill": 0})
