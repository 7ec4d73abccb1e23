"""Self-play opponent pool: snapshot schedule, eviction, sampling frequencies (fixed
seeds, tolerances of about 5 standard deviations) and state round trips."""

import json
import math

import numpy as np
import pytest

from jaxsrl.population.opponents import LATEST, OpponentPool, OpponentPoolConfig, PoolChange
from jaxsrl.population.ratings import Ratings

N = 20000  # draws per frequency test


@pytest.mark.parametrize("kwargs,match", [
    ({"snapshot_every": 0}, "snapshot_every=0"), ({"max_size": 0}, "max_size=0"),
    ({"p_latest": 1.5}, "p_latest=1.5"), ({"temperature": 0.0}, "temperature=0.0"),
    ({"sampling": "elo"}, "sampling='elo'; valid"), ({"evict": "random"}, "evict='random'; valid"),
    ({"snapshot_every": 2.5}, "snapshot_every=2.5"),
])
def test_bad_settings_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OpponentPool(OpponentPoolConfig(**kwargs))


def test_a_snapshot_every_k_versions_even_when_versions_skip():
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=3, max_size=10), name="hider")
    added = [pool.observe(v).added for v in range(11)]
    assert [a for a in added if a] == ["hider:0", "hider:3", "hider:6", "hider:9"]
    skipping = OpponentPool(OpponentPoolConfig(snapshot_every=3, max_size=10))
    for v in (0, 2, 5, 7, 8, 11, 11):
        skipping.observe(v)
    assert [skipping.version_of(s) for s in skipping.snapshots] == [0, 5, 8, 11]
    with pytest.raises(ValueError, match="version 4 is below the last one seen"):
        skipping.observe(4)


def test_oldest_is_dropped_beyond_max_size():
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=1, max_size=2))
    assert pool.observe(0) == PoolChange("snapshot:0", [])
    pool.observe(1)
    assert pool.observe(2) == PoolChange("snapshot:2", ["snapshot:0"])
    assert pool.snapshots == ["snapshot:1", "snapshot:2"]


def test_lowest_rated_is_dropped_but_never_the_newest():
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=1, max_size=3, evict="lowest_rated"))
    scores = {"snapshot:0": 5.0, "snapshot:1": -1.0, "snapshot:2": 2.0, "snapshot:3": -9.0}
    for v in range(3):
        pool.observe(v, scores.get)
    change = pool.observe(3, scores.get)  # the newest scores lowest but has not played
    assert change.dropped == ["snapshot:1"]
    assert pool.snapshots == ["snapshot:0", "snapshot:2", "snapshot:3"]
    ties = OpponentPool(OpponentPoolConfig(snapshot_every=1, max_size=2, evict="lowest_rated"))
    for v in range(3):
        ties.observe(v, lambda _: 0.0)
    assert ties.snapshots == ["snapshot:1", "snapshot:2"]  # a tie drops the oldest
    with pytest.raises(ValueError, match="needs score"):
        for v in range(3, 6):
            ties.observe(v)


def _frequencies(pool, seed, score=None):
    rng = np.random.default_rng(seed)
    draws = [pool.sample(rng, score) for _ in range(N)]
    return {k: draws.count(k) / N for k in set(draws)}


def test_uniform_sampling_frequencies_match_the_configured_probabilities():
    """p_latest = 0.8, four snapshots at 0.05 each: std 0.0028 and 0.0015."""
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=1, p_latest=0.8))
    for v in range(4):
        pool.observe(v)
    assert pool.probabilities() == pytest.approx({LATEST: 0.8, **{s: 0.05 for s in pool.snapshots}})
    freq = _frequencies(pool, 0)
    assert set(freq) == {LATEST, *pool.snapshots}
    assert abs(freq[LATEST] - 0.8) < 0.015
    assert all(abs(freq[s] - 0.05) < 0.008 for s in pool.snapshots)


def test_rating_weighted_sampling_follows_the_softmax_of_scores():
    """Scores 0..3 at temperature 2: weights exp(s / 2) / sum, times 1 - p_latest = 0.5
    (hand-computed with math.exp, not with the pool's code)."""
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=1, p_latest=0.5, sampling="rating",
                                           temperature=2.0))
    for v in range(4):
        pool.observe(v)
    score = {s: float(i) for i, s in enumerate(pool.snapshots)}.__getitem__
    z = sum(math.exp(i / 2) for i in range(4))
    expected = {LATEST: 0.5, **{s: 0.5 * math.exp(i / 2) / z for i, s in enumerate(pool.snapshots)}}
    assert pool.probabilities(score) == pytest.approx(expected, rel=1e-12)
    freq = _frequencies(pool, 1, score)
    for k, p in expected.items():
        assert abs(freq[k] - p) < 5 * math.sqrt(p * (1 - p) / N) + 1e-3
    with pytest.raises(ValueError, match="sampling='rating' needs score"):
        pool.sample(np.random.default_rng(0))


def test_edge_probabilities():
    empty = OpponentPool(OpponentPoolConfig(p_latest=0.0))
    assert all(empty.sample(np.random.default_rng(s)) == LATEST for s in range(20))
    never = OpponentPool(OpponentPoolConfig(snapshot_every=1, p_latest=0.0))
    always = OpponentPool(OpponentPoolConfig(snapshot_every=1, p_latest=1.0))
    for v in range(3):
        never.observe(v)
        always.observe(v)
    assert LATEST not in _frequencies(never, 2)
    assert _frequencies(always, 3) == {LATEST: 1.0}


def test_state_dict_round_trip_through_json():
    cfg = OpponentPoolConfig(snapshot_every=2, max_size=3)
    pool = OpponentPool(cfg, name="seeker")
    for v in range(9):
        pool.observe(v)
    restored = OpponentPool(cfg, name="seeker")
    restored.load(json.loads(json.dumps(pool.state_dict())))
    assert restored.state_dict() == pool.state_dict()
    assert restored.snapshots == ["seeker:4", "seeker:6", "seeker:8"]
    # The schedule continues where it stopped: 9 is too early, 10 is due.
    assert restored.observe(9).added is None and restored.observe(10).added == "seeker:10"
    with pytest.raises(ValueError, match="state of pool 'seeker' loaded into 'hider'"):
        OpponentPool(cfg, name="hider").load(pool.state_dict())
    with pytest.raises(ValueError, match="3 saved snapshots exceed max_size=2"):
        OpponentPool(OpponentPoolConfig(max_size=2), name="seeker").load(pool.state_dict())
    with pytest.raises(ValueError, match="format=None"):
        OpponentPool(cfg).load({})


def test_pool_with_ratings_keeps_the_stronger_snapshots():
    """Snapshot i beats latest with probability i / 5; lowest-rated eviction by ordinal
    drops the two weakest (0 and 1) first."""
    ratings, rng = Ratings(), np.random.default_rng(0)
    pool = OpponentPool(OpponentPoolConfig(snapshot_every=1, max_size=3, evict="lowest_rated",
                                           sampling="rating", p_latest=0.0))
    strength = {}
    for v in range(6):
        change = pool.observe(v, ratings.ordinal)
        ratings.fork(LATEST, change.added)
        strength[change.added] = v / 5
        for sid in change.dropped:
            ratings.forget(sid)
        for _ in range(40):
            opp = pool.sample(rng, ratings.ordinal)
            ratings.record(opp, LATEST, float(rng.random() < strength[opp]))
    assert pool.snapshots[-1] == "snapshot:5"
    assert "snapshot:0" not in pool.snapshots and "snapshot:1" not in pool.snapshots
    assert {r.id for r in ratings.table()} == {LATEST, *pool.snapshots}  # forgotten ones gone
