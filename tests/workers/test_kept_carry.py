"""The carry kept by the inference server (``jaxsrl.streams.kept_carry``): requests that
send ``carry_kept`` in place of the carry give the policy bit for bit the carry a full
request gives, so the learner receives the same segments; a server that kept nothing
asks for the request again; the actor's bit-for-bit check falls back to the full carry."""

import threading

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest
import zmq

from jaxsrl.experiment.metrics import MetricsAccumulator
from jaxsrl.parallel import devices
from jaxsrl.streams import wire
from jaxsrl.streams.kept_carry import KEPT, KeptCarries, keep_mask
from jaxsrl.streams.params import ParameterStore
from jaxsrl.workers.actor.worker import Actor
from jaxsrl.workers.inference.policy import PolicySettings, PolicyWorker
from policy_server import served

SPACE = gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32)  # CartPole-v1's
T = 8


def test_keep_mask_bit_for_bit():
    last = {"c": np.arange(12, dtype=np.float32).reshape(4, 3) + 1}
    carry = {"c": last["c"].copy()}
    carry["c"][2] = 0
    assert keep_mask(carry, last).tolist() == [1, 1, 0, 1]
    assert keep_mask(carry, None) is None
    neg = {"c": carry["c"].copy()}
    neg["c"][2] = -0.0  # not zero bits: the carry must travel
    assert keep_mask(neg, last) is None
    changed = {"c": carry["c"].copy()}
    changed["c"][1, 1] = np.nextafter(changed["c"][1, 1], np.float32(9))
    assert keep_mask(changed, last) is None
    assert keep_mask({"d": carry["c"]}, last) is None  # other names
    assert keep_mask({"c": carry["c"][:3]}, last) is None  # other rows


def test_kept_carries_fill_and_evict():
    kept = KeptCarries(max_bytes=2 * 4 * 3 * 4)  # two entries of 4 x 3 float32
    a = {"c": np.full((4, 3), 7, np.float32)}
    kept.put(b"x", 0, a)
    kept.put(b"x", 1, a)
    assert kept.get(b"x", 0, 4) is not None and kept.get(b"x", 0, 3) is None
    kept.put(b"y", 0, a)  # evicts the oldest
    assert kept.get(b"x", 0, 4) is None and kept.get(b"y", 0, 4) is not None and len(kept) == 2
    out = {"c": np.full((4, 3), np.nan, np.float32)}
    KeptCarries.fill(out, a, np.array([1, 0, 1, 1], np.uint8))
    assert (out["c"][[0, 2, 3]] == 7).all() and not np.signbit(out["c"][1]).any()
    assert (out["c"][1] == 0).all()
    with pytest.raises(ValueError):
        KeptCarries.fill(out, a, np.array([1, 2, 1, 1], np.uint8))


def fake_act(params, obs, carry, rng):
    """Deterministic recurrent policy: the action and logp depend on obs and carry; new
    carry = 0.75 carry + obs[:, :2] + s."""
    action = (obs[:, 0] + carry[:, 0] > 0).astype(jnp.int32)
    return action, 0.75 * carry + obs[:, :2] + params["s"], {"logp": obs.sum(-1) - carry[:, 1]}


def run_actor(kept_carry: bool, kept_carry_bytes: int = 1 << 30, segments: int = 12):
    """Segments (in the order each group sent them) of a CartPole actor (2 groups of 3
    envs) served by a real policy worker, and what the worker counted."""
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 0, {"s": jnp.float32(0.125)})
    act = devices.jit_act(fake_act, devices.local_mesh())
    worker = PolicyWorker("kept", "p", act, lambda n: jnp.zeros((n, 2), jnp.float32), SPACE,
                          store, metrics,
                          PolicySettings(max_rows=6, kept_carry_bytes=kept_carry_bytes))
    filled = []
    fill = worker._fill_kept
    worker._fill_kept = lambda *a: (filled.append(1), fill(*a))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    worker.ready.wait()
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    spec = {"actor_id": 0, "run_id": 1, "env": "CartPole-v1", "env_kwargs": {},
            "envs_per_group": 3, "ring_size": 2, "segment_length": T, "seed": 3,
            "streams": [{"policy": "p", "team": None, "inference_address": worker.address,
                         "sample_address": f"tcp://127.0.0.1:{port}"}],
            "carry_spec": [["carry/0", "float32", [2]]], "timeout_s": 30.0,
            "kept_carry": kept_carry}
    actor = Actor(spec)
    actor_thread = threading.Thread(target=actor.run, kwargs={"max_segments": segments}, daemon=True)
    actor_thread.start()
    got = []
    try:
        while len(got) < segments:
            assert pull.poll(60_000), "no segment"
            msg = wire.decode(pull.recv_multipart())
            got.append((msg.meta["group"], {k: np.array(v) for k, v in msg.arrays.items()}))
        actor_thread.join(30)
    finally:
        actor.stop.set()
        actor_thread.join(5)
        actor.close()
        worker.stop.set()
        thread.join(5)
        pull.close()
    by_group = {g: [a for gg, a in got if gg == g] for g in (0, 1)}
    return by_group, len(filled), metrics.counter("inference/carry_resends")


def assert_same_segments(a: dict, b: dict) -> None:
    for g in a:
        n = min(len(a[g]), len(b[g]))
        assert n >= 3
        for x, y in zip(a[g][:n], b[g][:n]):
            assert x.keys() == y.keys()
            for k in x:
                assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape
                assert x[k].tobytes() == y[k].tobytes(), k


def test_kept_carry_gives_the_learner_the_same_segments_bit_for_bit():
    full, filled_full, _ = run_actor(kept_carry=False)
    kept, filled_kept, resends = run_actor(kept_carry=True)
    assert filled_full == 0 and filled_kept > 10 and resends == 0  # kept requests were served
    assert_same_segments(full, kept)
    # episodes ended within the run: zeroed rows went as carry_kept 0
    assert any(s["terminated"].any() for segs in kept.values() for s in segs)
    # a server that keeps nothing asks again each time: the same segments still
    again, filled_none, resends = run_actor(kept_carry=True, kept_carry_bytes=0)
    assert filled_none == 0 and resends > 10
    assert_same_segments(full, again)


def test_a_kept_request_to_a_server_without_its_carry_is_answered_resend():
    store, metrics = ParameterStore(), MetricsAccumulator()
    store.publish("p", 0, {"s": jnp.float32(0.0)})
    worker = PolicyWorker("kept", "p", devices.jit_act(fake_act, devices.local_mesh()),
                          lambda n: jnp.zeros((n, 2), jnp.float32), SPACE, store, metrics,
                          PolicySettings(max_rows=4))
    with served(worker) as sock:
        obs = np.ones((2, 4), np.float32)
        meta = {"actor": 0, "run": 1, "group": 5}
        sock.send_multipart(wire.encode("act", {"obs": obs, KEPT: np.ones(2, np.uint8)}, meta))
        assert sock.poll(30_000)
        msg = wire.decode(sock.recv_multipart())
        assert msg.kind == "resend" and msg.meta == {"group": 5} and not msg.arrays
        carry = np.full((2, 2), 0.5, np.float32)
        sock.send_multipart(wire.encode("act", {"obs": obs, "carry/0": carry}, meta))
        assert sock.poll(30_000)
        first = wire.decode(sock.recv_multipart())
        assert first.kind == "action"
        # now kept: row 0 continues from the reply's carry, row 1 starts afresh
        for _ in range(2):  # the second time through the server's remembered verdict
            sock.send_multipart(wire.encode("act", {"obs": obs, KEPT: np.array([1, 0], np.uint8)},
                                            meta))
            assert sock.poll(30_000)
            reply = wire.decode(sock.recv_multipart())
            prev = np.array(first.arrays["carry/0"])
            want = np.stack([np.float32(0.75) * prev[0] + np.float32(1), np.ones(2, np.float32)])
            assert reply.arrays["carry/0"].tobytes() == want.astype(np.float32).tobytes()
            first = reply
        # a bad carry_kept value is refused with a resend, not served
        sock.send_multipart(wire.encode("act", {"obs": obs, KEPT: np.array([1, 3], np.uint8)}, meta))
        assert sock.poll(30_000)
        assert wire.decode(sock.recv_multipart()).kind == "resend"
