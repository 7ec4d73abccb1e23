"""Packed observations (``jaxsrl.streams.obs_pack``): hide-and-seek's boolean columns as
bits, rebuilt bit for bit before the policy and the learner see them; refusals."""

import threading

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.envs import make_actor_env
from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import obs_pack, wire
from jaxsrl.streams.obs_pack import ObsPacker, pack_arrays, unpack
from jaxsrl.streams.params import ParameterStore
from jaxsrl.streams.segment import pack_final_obs, segment_schema
from jaxsrl.streams.segment_gate import SegmentGate
from jaxsrl.streams.spaces import space_leaves
from jaxsrl.workers.actor.worker import Actor
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from policy_server import served


@pytest.mark.parametrize("env_id", ["hide_and_seek", "hide_and_seek_full"])
def test_hide_and_seek_observations_round_trip_bit_for_bit(env_id):
    env = make_actor_env(env_id, 2, 0)
    try:
        leaves = space_leaves(env.observation_space)
        packer = ObsPacker(leaves, env.wire_bits)
        assert ObsPacker.from_layout(leaves, packer.layout).layout == packer.layout
        rng = np.random.default_rng(1)
        env.reset()
        for _ in range(120):
            action = np.stack([rng.integers(0, n, env.num_rows) for n in env.action_space.nvec],
                              1).astype(np.int32)
            obs = env.step(action).obs
            packed = packer.encode(obs)
            assert set(packed) == {"obs#f", "obs#b"}
            assert packed["obs#f"].shape == (env.num_rows, packer.floats)
            back = packer.decode({k: np.frombuffer(v.tobytes(), v.dtype).reshape(v.shape)
                                  for k, v in packed.items()})
            assert back.keys() == obs.keys()
            for k in obs:
                assert back[k].dtype == np.float32 and back[k].tobytes() == obs[k].tobytes(), k
        sent = sum(v.nbytes for v in packed.values())
        assert sent < 0.85 * sum(v.nbytes for v in obs.values())
    finally:
        env.close()


def _packer():
    leaves = {"obs/m": ("float32", (3,)), "obs/x": ("float32", (2, 4))}
    return ObsPacker(leaves, {"m": None, "x": (1, 3)}), leaves


def test_values_that_are_not_exactly_zero_or_one_are_refused():
    packer, _ = _packer()
    obs = {"obs/m": np.ones((2, 3), np.float32), "obs/x": np.zeros((2, 2, 4), np.float32)}
    packer.encode(obs)
    for bad in (-0.0, 0.5, np.nan):
        o = {k: v.copy() for k, v in obs.items()}
        o["obs/x"][1, 0, 3] = bad
        with pytest.raises(ValueError, match="boolean"):
            packer.encode(o)
    o = {k: v.copy() for k, v in obs.items()}
    o["obs/x"][1, 0, 2] = -0.0  # a float column keeps its bits
    back = packer.decode(packer.encode(o))
    assert np.signbit(back["obs/x"][1, 0, 2])


def test_bad_layouts_and_arrays_are_wire_errors():
    packer, leaves = _packer()
    for layout in ("m:*;x:3,1", "q:*", "x:9", "m", 5, "m:*;m:*", ["m:*"], {"m": "*"}, None):
        with pytest.raises(wire.WireError):
            ObsPacker.from_layout(leaves, layout)
    packed = packer.encode({"obs/m": np.ones((2, 3), np.float32),
                            "obs/x": np.ones((2, 2, 4), np.float32)})
    meta = {obs_pack.META: packer.layout}
    with pytest.raises(wire.WireError):
        unpack(packed, {}, leaves)  # packed arrays, no layout
    with pytest.raises(wire.WireError):
        unpack({"obs#f": packed["obs#f"][:, :-1], "obs#b": packed["obs#b"]}, meta, leaves)
    with pytest.raises(wire.WireError):
        unpack({"obs#f": packed["obs#f"]}, meta, leaves)
    with pytest.raises(wire.WireError):
        unpack({**packed, "obs#b": packed["obs#b"].astype(np.int8)}, meta, leaves)
    assert unpack(packed, meta, leaves)["obs/x"].shape == (2, 2, 4)


def test_a_packed_segment_passes_the_gate_as_its_leaves():
    env = make_actor_env("hide_and_seek", 2, 3)
    try:
        T, n = 4, env.num_rows
        schema = segment_schema(env.observation_space, env.action_space, T, idle_rows=True)
        packer = ObsPacker(space_leaves(env.observation_space), env.wire_bits)
        rng = np.random.default_rng(0)
        arrays = {}
        for k, s in schema.items():
            shape = (n,) + tuple(s.shape[1:])
            arrays[k] = (rng.integers(0, 2, shape).astype(s.dtype) if s.dtype != "float32"
                         else rng.standard_normal(shape).astype(np.float32))
        arrays["version"][:] = 0
        for k in packer.names:  # boolean columns hold 0/1
            for name in (k, "final_" + k):
                flat = arrays[name].reshape(arrays[name].shape[:2] + (-1,))
                idx = np.flatnonzero(np.isin(np.arange(packer.size),
                                             packer.bit_index)[packer.offsets[packer.names.index(k)]:
                                                                packer.offsets[packer.names.index(k) + 1]])
                flat[..., idx] = rng.integers(0, 2, flat[..., idx].shape)
        sparse = pack_final_obs(arrays)
        gate = SegmentGate(schema, T, None, None, MetricsAccumulator())
        meta = {"actor": 0, "run": 1, "env_steps": 0}
        plain = gate.validate(wire.encode("segment", sparse, meta)).arrays
        frames = wire.encode("segment", pack_arrays(sparse, packer), {**meta, obs_pack.META: packer.layout})
        packed = gate.validate([bytes(f) for f in frames]).arrays
        assert plain.keys() == packed.keys() == schema.keys()
        for k in plain:
            assert plain[k].dtype == packed[k].dtype and plain[k].tobytes() == packed[k].tobytes(), k
        assert sum(len(f) for f in frames) < 0.9 * sum(len(f) for f in wire.encode("segment", sparse, meta))
    finally:
        env.close()


def fake_act(params, obs, carry, rng):
    """Deterministic: actions and logp from every observation leaf and the carry."""
    total = sum(jnp.sum(v.reshape(v.shape[0], -1) * (i + 1), axis=1)
                for i, v in enumerate(jax.tree.leaves(obs)))
    bits = (jnp.abs(total * 7.0).astype(jnp.int32) + carry[:, 0].astype(jnp.int32))
    action = jnp.stack([(bits >> j) % 2 for j in range(5)], axis=1).astype(jnp.int32)
    return action, carry + total[:, None] * params["s"], {"logp": total}


def run_actor(pack: bool, segments: int = 8) -> list:
    """Segments of a hide-and-seek actor (2 groups of 2 envs, T=4) served by a real policy
    worker, as the learner's gate admits them."""
    env = make_actor_env("hide_and_seek", 1, 0)
    space, aspace = env.observation_space, env.action_space
    env.close()
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 0, {"s": jnp.float32(0.001)})
    worker = PolicyWorker("pack", "p", devices.jit_act(fake_act, devices.local_mesh()),
                          lambda n: jnp.zeros((n, 1), jnp.float32), space, store, metrics,
                          PolicySettings(max_rows=16))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    worker.ready.wait()
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    spec = {"actor_id": 0, "run_id": 1, "env": "hide_and_seek", "env_kwargs": {},
            "envs_per_group": 2, "ring_size": 2, "segment_length": 4, "seed": 5,
            "streams": [{"policy": "p", "team": None, "inference_address": worker.address,
                         "sample_address": f"tcp://127.0.0.1:{port}"}],
            "carry_spec": [["carry/0", "float32", [1]]], "timeout_s": 60.0,
            "kept_carry": True, "obs_pack": pack}
    gate = SegmentGate(segment_schema(space, aspace, 4, worker._carry, idle_rows=True), 4, None,
                       None, MetricsAccumulator())
    actor = Actor(spec)
    assert (actor.packer is not None) == pack
    runner = threading.Thread(target=actor.run, kwargs={"max_segments": segments}, daemon=True)
    runner.start()
    got = []
    try:
        while len(got) < segments:
            while not pull.poll(100):
                assert runner.is_alive(), f"the actor stopped: {actor.error!r}"
            frames = pull.recv_multipart()
            assert any(k.endswith("#f") for k in wire.decode(frames).arrays) == pack
            msg = gate.validate(frames)
            got.append((msg.meta["group"], {k: np.array(v) for k, v in msg.arrays.items()}))
        runner.join(60)
    finally:
        actor.stop.set()
        runner.join(5)
        actor.close()
        worker.stop.set()
        thread.join(5)
        pull.close()
    return got


def test_the_learner_gets_the_same_segments_packed_or_not():
    plain, packed = run_actor(False), run_actor(True)
    for g in (0, 1):
        a = [x for gg, x in plain if gg == g]
        b = [x for gg, x in packed if gg == g]
        assert len(a) >= 2 and len(b) >= 2
        for x, y in zip(a, b):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes(), k


def test_the_server_drops_bad_packed_requests_and_answers_good_ones():
    env = make_actor_env("hide_and_seek", 1, 0)
    try:
        space, obs = env.observation_space, env.reset()
        packer = ObsPacker(space_leaves(space), env.wire_bits)
    finally:
        env.close()
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 0, {"s": jnp.float32(0.0)})
    worker = PolicyWorker("pack", "p", devices.jit_act(fake_act, devices.local_mesh()),
                          lambda n: jnp.zeros((n, 1), jnp.float32), space, store, metrics,
                          PolicySettings(max_rows=8))
    with served(worker) as sock:
        packed = packer.encode(obs)
        carry = np.zeros((len(packed["obs#f"]), 1), np.float32)
        meta = {"actor": 0, "run": 1, "group": 0}
        for bad_meta, arrays in (({obs_pack.META: ["x"]}, packed),
                                 ({obs_pack.META: "self:8"}, packed),
                                 ({obs_pack.META: packer.layout}, {"obs#f": packed["obs#f"]}),
                                 ({}, packed)):
            sock.send_multipart(wire.encode("act", {**arrays, "carry/0": carry}, {**meta, **bad_meta}))
        sock.send_multipart(wire.encode("act", {**packed, "carry/0": carry},
                                        {**meta, obs_pack.META: packer.layout}))
        assert sock.poll(60_000)
        reply = wire.decode(sock.recv_multipart())
        assert reply.kind == "action" and reply.arrays["action"].shape == (len(carry), 5)
        assert not sock.poll(200)  # the bad ones got no answer
        assert metrics.counter("dropped_requests") == 4



@pytest.mark.parametrize("env_id", ["hide_and_seek", "hide_and_seek_full"])
def test_the_learners_frame_cap_admits_packed_segments_of_its_most_rows(env_id):
    """ZeroMQ disconnects a peer whose frame exceeds the socket's MAXMSGSIZE, and says
    nothing: packing joins every observation leaf into one frame (``obs#f``), so the
    learner's cap must count the joined row, not the largest leaf."""
    env = make_actor_env(env_id, 2, 0)
    try:
        space, aspace = env.observation_space, env.action_space
        packer, n = ObsPacker(space_leaves(space), env.wire_bits), env.num_rows
    finally:
        env.close()
    T = 20
    schema = segment_schema(space, aspace, T, idle_rows=True)
    gate = SegmentGate(schema, T, n, None, MetricsAccumulator())
    arrays = {k: np.zeros((n,) + tuple(s.shape[1:]), s.dtype) for k, s in schema.items()}
    frames = wire.encode("segment", pack_arrays(arrays, packer),
                         {"actor": 0, "run": 1, "env_steps": 0, obs_pack.META: packer.layout})
    assert max(len(f) for f in frames[1:]) <= gate.max_frame_bytes
    assert sum(len(f) for f in frames[1:]) <= gate.max_bytes


def test_the_servers_frame_cap_admits_packed_requests_of_its_most_rows():
    """The server's cap likewise: three leaves of 4,096 values, one of them bits, pack into a
    frame of 8,192 float32 values a row, twice the largest leaf (and above the header cap)."""
    space = gym.spaces.Dict({k: gym.spaces.Box(0.0, 1.0, (4096,), np.float32) for k in "abc"})
    packer = ObsPacker(space_leaves(space), {"a": None})
    store = ParameterStore()
    store.publish("p", 0, {"s": jnp.float32(0.0)})
    worker = PolicyWorker("pack", "p", devices.jit_act(fake_act, devices.local_mesh()),
                          lambda m: jnp.zeros((m, 1), jnp.float32), space, store,
                          MetricsAccumulator(), PolicySettings(max_rows=16))
    rows = {f"obs/{k}": np.ones((worker.max_rows, 4096), np.float32) for k in "abc"}
    frames = wire.encode("act", {**packer.encode(rows), "carry/0": np.zeros((worker.max_rows, 1), np.float32)},
                         {"actor": 0, "run": 1, "group": 0, obs_pack.META: packer.layout})
    assert max(len(f) for f in frames[1:]) <= worker.max_frame_bytes
    assert sum(len(f) for f in frames[1:]) <= worker.max_bytes
