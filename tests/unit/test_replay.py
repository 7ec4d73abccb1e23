"""Replay buffer (jaxsrl/workers/buffer) against NumPy formulas of Schaul et al. 2016.

Proportional sampling P(i) = p_i^alpha / sum_k p_k^alpha (Eq. 1) and importance weights
w_i = (N P(i))^-beta / max_j w_j (Sec. 3.4) are recomputed here from the priorities
the test set, not read from the buffer. Items carry their insertion number ``i``.
(With the max over the batch, N cancels out of w_i: dropping it is not a mutation.)
"""

import jax
import numpy as np
import pytest
from scipy import stats as sps

from jaxsrl.core.agent import ReplaySpec
from jaxsrl.workers.buffer import replay as replay_mod
from jaxsrl.workers.buffer.replay import Replay, beta_schedule
from jaxsrl.workers.buffer.stats import ReplayStats

EXAMPLE = {"i": np.int32(0), "obs": np.zeros((2,), np.float32), "policy_version": np.int32(0)}


def items(start, n, version=0):
    i = np.arange(start, start + n, dtype=np.int32)
    return {"i": i, "obs": np.stack([i, -i], 1).astype(np.float32),
            "policy_version": np.full(n, version, np.int32)}


def make(capacity=64, batch=None, prioritised=True, alpha=0.6, beta=0.4, **kw):
    spec = ReplaySpec(capacity=capacity, batch_size=batch or capacity, prioritised=prioritised,
                      priority_exponent=alpha, importance_exponent=beta, min_fill=1)
    return Replay(spec, EXAMPLE, **kw)


def draws(r, n_batches, seed=0, beta=None):
    """Sampled insertion numbers, weights and ids of ``n_batches`` batches."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n_batches)
    out = [jax.device_get(r.sample(k, beta)) for k in keys]
    return (np.concatenate([b.items["i"] for b, _ in out]),
            np.concatenate([b.weights for b, _ in out]), np.concatenate([ids for _, ids in out]))


PRIORITIES = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 0.3, 3.0], np.float32)


def test_proportional_sampling_matches_p_alpha():
    alpha = 0.6
    r = make(alpha=alpha)
    r.add(items(0, 8))
    r.set_priorities(np.arange(8, dtype=np.int32), PRIORITIES)  # ids = insertion numbers
    sampled, _, ids = draws(r, 200)
    np.testing.assert_array_equal(ids, sampled)
    counts = np.bincount(sampled, minlength=8)
    expected = PRIORITIES**alpha / np.sum(PRIORITIES**alpha) * len(sampled)
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert sps.chi2.sf(chi2, df=7) > 1e-3, (counts, expected.round())
    np.testing.assert_allclose(counts / len(sampled), expected / len(sampled), atol=0.01)


def test_importance_weights_match_numpy_and_new_items_get_max_priority():
    alpha, beta = 0.7, 0.5
    r = make(alpha=alpha)
    r.add(items(0, 8))
    r.set_priorities(np.arange(8, dtype=np.int32), PRIORITIES)
    r.add(items(8, 2))  # enter at the largest priority so far (8.0), Algorithm 1 line 6
    p = np.concatenate([PRIORITIES, [8.0, 8.0]]).astype(np.float64)
    prob = p**alpha / np.sum(p**alpha)
    for b in (0.0, beta, 1.0):
        sampled, weights, _ = draws(r, 5, beta=b)
        for lo in range(0, len(sampled), 64):  # max over each sampled batch of 64
            s = sampled[lo:lo + 64]
            w = (len(p) * prob[s]) ** -b
            np.testing.assert_allclose(weights[lo:lo + 64], w / w.max(), rtol=1e-5)
    mean = r.priority_stats()["priority_mean"]
    np.testing.assert_allclose(mean, np.mean(p**alpha), rtol=1e-5)


def test_uniform_mode_draws_every_held_item_equally_with_unit_weights():
    r = make(prioritised=False)
    r.add(items(0, 10))
    r.set_priorities(np.arange(4, dtype=np.int32), np.full(4, 100.0, np.float32))  # no-op
    sampled, weights, ids = draws(r, 150)
    np.testing.assert_array_equal(weights, 1.0)
    np.testing.assert_array_equal(ids, sampled)
    counts = np.bincount(sampled, minlength=10)
    assert len(counts) == 10
    assert sps.chisquare(counts).pvalue > 1e-3, counts
    assert r.priority_stats() == {}


def test_set_priorities_changes_sampling():
    r = make(alpha=1.0)
    r.add(items(0, 4))
    first, _, _ = draws(r, 20)
    assert set(first) == {0, 1, 2, 3}
    r.set_priorities(np.array([0, 1, 2, 3], np.int32), np.array([0.0, 1.0, 0.0, 3.0], np.float32))
    sampled, _, _ = draws(r, 50, seed=1)
    assert set(sampled) == {1, 3}
    assert abs(np.mean(sampled == 3) - 0.75) < 0.03


def test_invalid_rows_are_never_written_or_sampled():
    for prioritised in (True, False):
        r = make(capacity=32, prioritised=prioritised)
        batch = items(0, 20)
        valid = np.arange(20) % 3 != 0
        batch["i"][~valid] = -1
        assert r.add(batch, valid) == valid.sum() == r.size
        sampled, _, _ = draws(r, 30)
        assert (sampled >= 0).all()
        assert set(sampled) == set(batch["i"][valid])


def test_wrap_around_keeps_the_newest_capacity_items():
    for prioritised in (True, False):
        r = make(capacity=16, prioritised=prioritised, max_add_chunk=8)
        start, order = 0, []  # order: the values written, in write order
        for n in (3, 7, 13, 5, 1, 11, 40, 6):  # 40 > capacity in one add: its last 16 only
            assert r.add(items(start, n)) == min(n, 16)
            order += list(range(start, start + n))[-16:]
            start += n
        assert r.size == 16 and r.inserts == len(order)
        kept = np.arange(start - 16, start)
        np.testing.assert_array_equal(np.sort(r.state_dict()["items"]["i"]), kept)
        sampled, _, ids = draws(r, 30)
        assert set(sampled) == set(kept)
        np.testing.assert_array_equal(ids, [order.index(i) for i in sampled])  # write numbers


def test_state_dict_round_trip_samples_identically():
    for prioritised in (True, False):
        a = make(capacity=16, prioritised=prioritised)
        a.add(items(0, 13))
        a.add(items(13, 8))  # wrapped: the write position is 5
        _, _, ids = draws(a, 1)
        a.set_priorities(ids, np.linspace(0.1, 5.0, len(ids)).astype(np.float32))
        b = make(capacity=16, prioritised=prioritised)
        b.load_state_dict(a.state_dict())
        for r in (a, b):
            r.add(items(21, 5))  # continues at the restored write position
        for x, y in zip(draws(a, 3, seed=7), draws(b, 3, seed=7)):
            np.testing.assert_array_equal(x, y)
        assert (a.inserts, a.samples, a.size) == (b.inserts, b.samples, b.size)
        other = make(capacity=8, prioritised=prioritised)
        with pytest.raises(ValueError, match="load_state_dict"):
            other.load_state_dict(a.state_dict())


def test_no_recompiles_after_warmup():
    r = make(capacity=64, batch=8, max_add_chunk=16)
    r.warmup()
    assert r.inserts == r.size == 0
    rng = np.random.default_rng(0)
    keys = list(jax.random.split(jax.random.PRNGKey(0), 20))
    compiles = []
    listener = lambda event, *a, **k: compiles.append(event) if "backend_compile" in event else None  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        start = 0
        for key in keys:
            n = int(rng.integers(1, 100))
            r.add(items(start, n), rng.random(n) < 0.8)
            start += n
            _, ids = r.sample(key, float(rng.random()))
            r.set_priorities(ids, rng.random(8).astype(np.float32))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiles == []


def test_set_priorities_skips_overwritten_items_and_counts_bad_values():
    r = make(capacity=8, alpha=1.0)
    r.add(items(0, 8))
    _, ids = r.sample(jax.random.PRNGKey(0))
    r.add(items(8, 8))  # every sampled item is overwritten
    r.set_priorities(ids, np.full(ids.shape, 50.0, np.float32))
    assert r.priority_stats()["priority_max"] == 1.0
    bad = np.array([np.nan, -1.0, np.inf, 2.0], np.float32)
    r.set_priorities(np.array([8, 9, 10, 11], np.int32), bad)
    assert r.bad_priorities == 3
    assert r.priority_stats() == {"priority_mean": pytest.approx(9 / 8), "priority_max": 2.0}


def test_ids_stay_valid_past_the_id_period(monkeypatch):
    monkeypatch.setattr(replay_mod, "ID_PERIOD", 40)  # period 32 for capacity 16
    r = make(capacity=16, alpha=1.0, max_add_chunk=8)
    start = 0
    for n in (7,) * 29:  # 203 items: the ids and flashbax's insertion counter wrap
        r.add(items(start, n))
        start += n
    assert r.state_dict()["running_index"] < 40 + 16  # flashbax's int32 counter is bounded
    sampled, _, ids = draws(r, 3)
    np.testing.assert_array_equal(ids, sampled % 32)  # 203 % 32 = 11: some ids wrap
    held = np.arange(start - 16, start)
    p = (1 + held % 5).astype(np.float32)
    r.set_priorities((held % 32).astype(np.int32), p)
    assert r.priority_stats()["priority_mean"] == pytest.approx(p.mean())
    top = np.argmax(sampled)  # not the oldest item, which the next add overwrites
    r.set_priorities(ids[top:top + 1], np.array([1e6], np.float32))  # it dominates
    newest, _, _ = draws(r, 3, seed=1)
    assert np.mean(newest == sampled[top]) > 0.95
    r.add(items(start, 1))  # enters at the new max priority, like the dominant one
    last, _, _ = draws(r, 3, seed=2)
    assert set(last) == {sampled[top], start}


def test_bad_input_raises_clear_errors():
    r = make(capacity=8)
    with pytest.raises(ValueError, match="empty"):
        r.sample(jax.random.PRNGKey(0))
    bad = items(0, 3)
    bad["i"] = bad["i"].astype(np.int64)
    with pytest.raises(TypeError, match=r"\['i'\].*int64"):
        r.add(bad)
    bad = items(0, 3)
    bad["obs"] = bad["obs"][:2]
    with pytest.raises(ValueError, match=r"\['obs'\]"):
        r.add(bad)
    with pytest.raises(ValueError, match="valid"):
        r.add(items(0, 3), np.ones(4, bool))
    with pytest.raises(ValueError, match="structure"):
        r.add({"i": np.zeros(3, np.int32)})
    r.add(items(0, 3))
    with pytest.raises(ValueError, match="beta"):
        r.sample(jax.random.PRNGKey(0), 1.5)
    with pytest.raises(ValueError, match="batch_size"):
        make(capacity=8, batch=9)
    with pytest.raises(ValueError, match="priority_exponent"):
        make(alpha=1.5)


def test_beta_schedule_is_linear_to_one():
    beta = beta_schedule(0.4, 100)
    assert [beta(u) for u in (0, 25, 100, 500)] == pytest.approx([0.4, 0.55, 1.0, 1.0])
    with pytest.raises(ValueError, match="beta0"):
        beta_schedule(1.2, 10)
    with pytest.raises(ValueError, match="planned_updates"):
        beta_schedule(0.4, 0)


def test_stats_report_staleness_against_numpy():
    r = make(prioritised=True)
    versions = np.array([0, 1, 2, 3, 5, 8, 9, 9], np.int32)
    batch = items(0, 8)
    batch["policy_version"] = versions
    r.add(batch)
    st = ReplayStats()
    ages = []
    for k, current in zip(jax.random.split(jax.random.PRNGKey(0), 3), (10, 12, 15)):
        b, _ = r.sample(k)
        st.record_sample(b.items, current)
        ages.append(current - np.asarray(b.items["policy_version"]))
    m = st.metrics(r)
    ages = np.concatenate(ages)
    assert m["replay/staleness_mean"] == pytest.approx(ages.mean())
    assert m["replay/staleness_max"] == ages.max()
    assert (m["replay/size"], m["replay/inserts"], m["replay/samples"]) == (8, 8, 3 * 64)
    assert m["replay/priority_max"] == 1.0
    assert "replay/staleness_mean" not in st.metrics(r)  # reset after reading


def test_the_device_buffer_is_made_once_and_only_when_used():
    """A Replay whose pure bodies are traced elsewhere (the device actors' step) holds no
    buffer of its own; one that is used holds exactly one (the device actors' start used
    to hold two capacity-sized buffers: this Replay's and the step's)."""
    def capacity_arrays():
        return [a for a in jax.live_arrays() if a.ndim >= 2 and a.shape[:2] == (1, 4096)]

    before = len(capacity_arrays())
    r = make(capacity=4096, batch=8)
    assert len(capacity_arrays()) == before  # nothing made yet
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    state = r.empty_state(sharding)  # what the device actors' step carries
    assert all(x.sharding == sharding for x in jax.tree.leaves(state))
    assert len(capacity_arrays()) == before + len(EXAMPLE)
    del state
    r.add(items(0, 3))
    assert len(capacity_arrays()) == before + len(EXAMPLE)  # its own, made at first use
    assert r.size == 3
