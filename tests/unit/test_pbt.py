"""Population-based training: search space parsing, truncation selection, explore, the
exploit copy on learner states, and the lineage record.

References are independent of the code: truncation is checked against the definition
(the bottom set holds the k smallest fitnesses, the top set the k largest, checked over
many random populations with many ties), explore against ``clip(source * factor)``
computed by hand, and resampling against the log-uniform law (its mean in log space).
"""

import json
import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import HYPERPARAMETERS, ppo
from agents.state import LearnerState
from jaxsrl.core.agent import EnvSpec
from jaxsrl.population.lineage import Lineage
from jaxsrl.population.pbt import PBT, Event, PBTConfig, apply, truncation
from jaxsrl.population.search_space import Range, parse_search_space, sample_hyper

SPACE_CFG = {"learning_rate": {"min": 1e-5, "max": 1e-2, "log": True},
             "ent_coef": {"min": 0.0, "max": 0.05},
             "gamma": {"min": 0.9, "max": 0.999}}
SPACE = parse_search_space(SPACE_CFG, HYPERPARAMETERS["ppo"])
HYPER = {"learning_rate": 1e-3, "ent_coef": 0.01, "gamma": 0.99, "vf_coef": 0.5}


# ---------------------------------------------------------------- search space

def test_parse_search_space():
    assert SPACE == {"learning_rate": Range(1e-5, 1e-2, True), "ent_coef": Range(0.0, 0.05),
                     "gamma": Range(0.9, 0.999)}
    assert parse_search_space({"x": {"min": 0, "max": 1}})["x"] == Range(0.0, 1.0, False)


@pytest.mark.parametrize("spec,match", [
    ({}, "non-empty mapping"),
    ([("gamma", {})], "non-empty mapping"),
    ({"momentum": {"min": 0, "max": 1}}, r"'momentum' is not a hyperparameter.*valid: learning_rate"),
    ({"gamma": [0.9, 0.99]}, r"search_space.gamma=\[0.9, 0.99\] must be a mapping"),
    ({"gamma": {"min": 0.9, "max": 0.99, "step": 1}}, r"unknown key\(s\) \['step'\]"),
    ({"gamma": {"min": 0.9}}, "gamma: missing 'max'"),
    ({"gamma": {"min": "0.9", "max": 1}}, "gamma.min='0.9' must be a finite number"),
    ({"gamma": {"min": True, "max": 1}}, "gamma.min=True must be a finite number"),
    ({"gamma": {"min": 0.9, "max": math.inf}}, "gamma.max=inf must be a finite number"),
    ({"gamma": {"min": 0.99, "max": 0.9}}, "min=0.99 must be below max=0.9"),
    ({"gamma": {"min": 0.9, "max": 0.9}}, "must be below"),
    ({"ent_coef": {"min": 0.0, "max": 0.1, "log": True}}, "min=0.0 must be > 0 for a log range"),
    ({"ent_coef": {"min": 0.0, "max": 0.1, "log": "yes"}}, "ent_coef.log='yes' must be true or false"),
])
def test_bad_search_spaces_are_refused_naming_the_entry(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_search_space(spec, HYPERPARAMETERS["ppo"])


def test_log_range_resamples_log_uniformly():
    """Mean of log10 of 20k draws from [1e-5, 1e-2] is -3.5 (a uniform law on [-5, -2]:
    std of the mean 0.87/sqrt(20000) = 0.006); a uniform draw would put it near -2.3."""
    rng = np.random.default_rng(0)
    draws = np.array([SPACE["learning_rate"].sample(rng) for _ in range(20000)])
    assert draws.min() >= 1e-5 and draws.max() <= 1e-2
    assert abs(np.log10(draws).mean() + 3.5) < 0.03
    assert abs(np.mean(draws < 1e-4) - 1 / 3) < 0.02  # a decade per third
    lin = np.array([SPACE["gamma"].sample(rng) for _ in range(20000)])
    assert abs(lin.mean() - 0.9495) < 0.002
    assert set(sample_hyper(SPACE, rng)) == set(SPACE)


# ---------------------------------------------------------------- truncation

@pytest.mark.parametrize("fraction", [0.0, -0.1, 0.51, 1.0, "0.25"])
def test_bad_fractions_are_refused(fraction):
    with pytest.raises(ValueError, match=r"pbt.fraction=.* must be in \(0, 0.5\]"):
        truncation({"a": 1.0, "b": 2.0}, fraction, np.random.default_rng(0))
    with pytest.raises(ValueError, match="pbt.fraction"):
        PBT(SPACE, PBTConfig(fraction=fraction))


@pytest.mark.parametrize("config,match", [
    (PBTConfig(perturb_factors=()), "perturb_factors"),
    (PBTConfig(perturb_factors=(0.8, -1.2)), "perturb_factors"),
    (PBTConfig(resample_probability=1.5), "resample_probability=1.5"),
])
def test_bad_explore_settings_are_refused(config, match):
    with pytest.raises(ValueError, match=match):
        PBT(SPACE, config)


@pytest.mark.parametrize("fitness,bottom,top", [
    ({"a": 1.0, "b": 2.0}, ["a"], ["b"]),  # N = 2
    ({"a": 3.0, "b": -1.0, "c": 0.5, "d": 2.0}, ["b"], ["a"]),  # N = 4: one each
    ({"a": 1.0}, [], []),  # nobody to copy
    ({"a": 1.0, "b": 5.0, "c": 3.0}, ["a"], ["b"]),  # N = 3: ceil(0.75) = 1
    ({f"m{i}": float(i) for i in range(8)}, ["m0", "m1"], ["m6", "m7"]),  # N = 8: 2 each
    ({f"m{i}": float(i) for i in range(5)}, ["m0", "m1"], ["m3", "m4"]),  # N = 5: ceil(1.25)
    ({"a": math.nan, "b": 0.0, "c": 1.0, "d": 2.0}, ["a"], ["d"]),  # NaN ranks lowest
])
def test_truncation_picks_the_bottom_and_the_top(fitness, bottom, top):
    assert truncation(fitness, 0.25, np.random.default_rng(0)) == (bottom, top)


def test_half_fraction_never_overlaps():
    fit = {"a": 1.0, "b": 2.0, "c": 3.0}
    assert truncation(fit, 0.5, np.random.default_rng(0)) == (["a"], ["c"])


def test_truncation_matches_its_definition_on_random_populations_with_ties():
    """Reference: k = min(ceil(f N), N // 2); every bottom fitness <= every other one,
    every top fitness >= every other one; the two are disjoint."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        n, frac = int(rng.integers(2, 12)), float(rng.choice([0.1, 0.2, 0.25, 0.4, 0.5]))
        fit = {f"m{i}": float(rng.integers(0, 4)) for i in range(n)}  # many ties
        bottom, top = truncation(fit, frac, rng)
        k = min(math.ceil(frac * n), n // 2)
        assert len(bottom) == len(top) == k and not set(bottom) & set(top)
        rest = [fit[m] for m in fit if m not in bottom]
        assert max(fit[m] for m in bottom) <= min(rest)
        rest = [fit[m] for m in fit if m not in top]
        assert min(fit[m] for m in top) >= max(rest)


def test_ties_are_broken_at_random_not_by_name():
    picks_top, picks_bottom = set(), set()
    for seed in range(60):
        rng = np.random.default_rng(seed)
        picks_top.update(truncation({"a": 0.0, "b": 1.0, "c": 3.0, "d": 3.0}, 0.25, rng)[1])
        picks_bottom.update(truncation({"a": 1.0, "b": 1.0, "c": 2.0, "d": 3.0}, 0.25, rng)[0])
    assert picks_top == {"c", "d"} and picks_bottom == {"a", "b"}


def test_equal_fitness_makes_no_event():
    """Copying an equal member gains nothing and loses diversity."""
    pbt = PBT(SPACE)
    hyper = {m: dict(HYPER) for m in "abcd"}
    assert pbt.decide({m: 1.0 for m in "abcd"}, hyper, np.random.default_rng(0)) == []
    # Bottom ties with one top member only: it copies the strictly fitter one.
    for seed in range(20):
        events = pbt.decide({"a": 1.0, "b": 2.0, "c": 3.0, "d": 1.0, "e": 3.0, "f": 1.0,
                             "g": 2.0, "h": 1.0}, {m: dict(HYPER) for m in "abcdefgh"},
                            np.random.default_rng(seed))
        assert all(e.member in "adfh" and e.source in "ce" for e in events)


# ---------------------------------------------------------------- decide / explore

def _population(n=8, seed=0):
    rng = np.random.default_rng(seed)
    fitness = {f"m{i}": float(i) for i in range(n)}
    hyper = {m: {**HYPER, **sample_hyper(SPACE, rng)} for m in fitness}
    return fitness, hyper


def test_decide_copies_a_fitter_top_member_and_explores_only_declared_names():
    fitness, hyper = _population()
    pbt = PBT(SPACE, PBTConfig(resample_probability=0.0))
    seen_sources, factors = set(), []
    for seed in range(50):
        events = pbt.decide(fitness, hyper, np.random.default_rng(seed))
        assert [e.member for e in events] == ["m0", "m1"]
        for e in events:
            assert e.source in ("m6", "m7") and e.source_fitness > e.member_fitness
            seen_sources.add(e.source)
            assert e.before == hyper[e.member]
            assert set(e.after) == set(hyper[e.source])
            assert e.after["vf_coef"] == hyper[e.source]["vf_coef"]  # not in the space: copied
            for name, r in SPACE.items():
                f = {"*0.8": 0.8, "*1.2": 1.2}[e.how[name]]
                factors.append(f)
                assert e.after[name] == min(max(hyper[e.source][name] * f, r.min), r.max)
                assert r.min <= e.after[name] <= r.max
    assert seen_sources == {"m6", "m7"}  # uniform over the top
    assert abs(np.mean(np.array(factors) == 0.8) - 0.5) < 0.06  # 300 draws


def test_explore_clips_to_the_range_and_resamples_with_its_probability():
    pbt = PBT(SPACE, PBTConfig(resample_probability=0.3))
    rng = np.random.default_rng(0)
    at_edge = {**HYPER, "gamma": 0.999, "learning_rate": 1e-5, "ent_coef": 0.0}
    how = []
    for _ in range(2000):
        new, h = pbt.explore(at_edge, rng)
        how += list(h.values())
        assert all(SPACE[n].contains(new[n]) for n in SPACE)
        assert new["vf_coef"] == HYPER["vf_coef"]
        if h["gamma"] == "*1.2":
            assert new["gamma"] == 0.999  # clipped at max
        if h["learning_rate"] == "*0.8":
            assert new["learning_rate"] == 1e-5  # clipped at min
    assert abs(how.count("resample") / len(how) - 0.3) < 0.02  # 6000 draws, std 0.006


def test_decide_refuses_bad_input_naming_it():
    pbt, rng = PBT(SPACE), np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"no hyperparameters for members \['b'\]"):
        pbt.decide({"a": 0.0, "b": 1.0}, {"a": HYPER}, rng)
    with pytest.raises(ValueError, match=r"search space are not in the member's hyper"):
        pbt.decide({"a": 0.0, "b": 1.0}, {"a": HYPER, "b": {"learning_rate": 1e-3}}, rng)
    with pytest.raises(ValueError, match="members must be strings"):
        pbt.decide({0: 0.0, 1: 1.0}, {0: HYPER, 1: HYPER}, rng)
    with pytest.raises(ValueError, match=r"fitness\['a'\]='high' is not a number"):
        pbt.decide({"a": "high", "b": 1.0}, {"a": HYPER, "b": HYPER}, rng)


def test_pbt_finds_a_good_learning_rate_on_a_toy_problem():
    """Fitness peaks at lr = 1e-3; members start spread over [1e-5, 1e-2]. After 30 rounds
    of exploit and explore the population sits within a factor 2 of the peak."""
    rng = np.random.default_rng(0)
    space = parse_search_space({"learning_rate": SPACE_CFG["learning_rate"]})
    pbt = PBT(space)
    hyper = {f"m{i}": sample_hyper(space, rng) for i in range(8)}
    for _ in range(30):
        fitness = {m: -abs(math.log10(h["learning_rate"]) + 3) for m, h in hyper.items()}
        for e in pbt.decide(fitness, hyper, rng):
            hyper[e.member] = e.after
    lrs = np.array([h["learning_rate"] for h in hyper.values()])
    assert np.median(np.abs(np.log10(lrs) + 3)) < math.log10(2)


# ---------------------------------------------------------------- apply (exploit copy)

def _states():
    """Two PPO learner states with normalisers whose every leaf differs."""
    cfg = ppo.PPOConfig(hidden_sizes=(4,), normalize_observations=True, normalize_values=True)
    fns = ppo.make(cfg, EnvSpec(gymnasium.spaces.Box(-1, 1, (3,), np.float32),
                                gymnasium.spaces.Discrete(2)), 5)
    out = {}
    for i, m in enumerate("ab"):
        s = fns.init(jax.random.PRNGKey(i))
        leaves, tree = jax.tree.flatten(s)
        keys = jax.random.split(jax.random.PRNGKey(10 + i), len(leaves))
        out[m] = jax.tree.unflatten(tree, [
            (x + jax.random.uniform(k, x.shape)).astype(x.dtype) if x.dtype != jnp.int32
            else x + 3 + i for x, k in zip(leaves, keys)])
    return out


def test_apply_copies_the_whole_learner_state_and_sets_the_new_hyperparameters():
    states = _states()
    src, dst = states["b"], states["a"]
    before = {k: float(v) for k, v in dst.hyper.items()}
    after = {**{k: float(v) for k, v in src.hyper.items()}, "learning_rate": 1.234e-4, "gamma": 0.95}
    out = apply(Event("a", "b", before, after, {}, 0.0, 1.0), states)
    new = out["a"]
    assert out["b"] is src and states["a"] is dst  # inputs untouched
    assert jax.tree.structure(new) == jax.tree.structure(src)
    # Parameters, optimiser state (Adam moments, counts), normaliser statistics, step:
    for part in ("params", "opt_state", "update_step"):
        jax.tree.map(np.testing.assert_array_equal, getattr(new, part), getattr(src, part))
    assert set(new.params) == {"net", "obs_stats", "ret_stats"}
    for k, v in new.hyper.items():
        assert v.dtype == src.hyper[k].dtype and v.shape == ()
        assert float(v) == np.float32(after[k])
    assert float(new.hyper["ent_coef"]) == float(src.hyper["ent_coef"])
    # No shared buffer with the source (a learner may donate its state).
    for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(src)):
        assert x.unsafe_buffer_pointer() != y.unsafe_buffer_pointer()


def test_apply_keeps_committed_placement():
    states = {m: jax.device_put(s, jax.devices()[0]) for m, s in _states().items()}
    after = {k: float(v) * 1.2 for k, v in states["b"].hyper.items()}
    new = apply(Event("a", "b", {}, after, {}, 0.0, 1.0), states)["a"]
    assert all(x.committed for x in jax.tree.leaves(new))
    assert all(not x.committed for x in jax.tree.leaves(
        apply(Event("a", "b", {}, after, {}, 0.0, 1.0), _states())["a"]))


def test_apply_refuses_bad_events_naming_them():
    states = _states()
    hyper = {k: float(v) for k, v in states["b"].hyper.items()}
    with pytest.raises(ValueError, match="source 'z' has no state"):
        apply(Event("a", "z", {}, hyper, {}, 0.0, 1.0), states)
    with pytest.raises(ValueError, match=r"\['momentum'\] are not in the learner state's hyper"):
        apply(Event("a", "b", {}, {**hyper, "momentum": 0.9}, {}, 0.0, 1.0), states)
    legacy = {m: LearnerState(s.params, s.opt_state, s.update_step) for m, s in states.items()}
    with pytest.raises(ValueError, match="has no hyper dict"):
        apply(Event("a", "b", {}, hyper, {}, 0.0, 1.0), legacy)


# ---------------------------------------------------------------- events and lineage

def test_event_and_lineage_round_trip_through_json():
    fitness, hyper = _population(4)
    lineage = Lineage(hyper)
    rng = np.random.default_rng(0)
    fitness["m1"] = math.nan
    for step in (100, 200):
        events = PBT(SPACE).decide(fitness, hyper, rng)
        assert events
        lineage.record_all(events, step)
        for e in events:
            assert Event.from_dict(json.loads(json.dumps(e.to_dict()))).to_dict() == e.to_dict()
            hyper[e.member] = e.after
    restored = Lineage({})
    restored.load(json.loads(json.dumps(lineage.state_dict())))
    assert restored.state_dict() == lineage.state_dict()
    assert [s for s, _ in restored.history("m1")] == [100, 200]


def test_lineage_hyper_schedule_and_ancestry():
    h = lambda lr: {"learning_rate": lr}  # noqa: E731
    lin = Lineage({"a": h(1.0), "b": h(2.0), "c": h(3.0)})
    lin.record(Event("a", "b", h(1.0), h(2.4), {}, 0.0, 1.0), 10)
    lin.record(Event("c", "a", h(3.0), h(2.0), {}, 0.0, 1.0), 20)
    assert lin.hyper_at("a", 5) == h(1.0) and lin.hyper_at("a", 10) == h(2.4)
    assert lin.hyper_at("c", 30) == h(2.0)
    # c's weights came from a at 20, whose weights came from b at 10.
    assert lin.ancestry("c") == [("c", math.inf), ("a", 20), ("b", 10)]
    assert lin.ancestry("b") == [("b", math.inf)]
    # Two rounds at the same step: the order of recording decides.
    same = Lineage({"a": h(1.0), "b": h(2.0), "c": h(3.0)})
    same.record(Event("a", "b", h(1.0), h(2.4), {}, 0.0, 1.0), 10)
    same.record(Event("c", "a", h(3.0), h(2.4), {}, 0.0, 1.0), 10)
    assert same.ancestry("c") == [("c", math.inf), ("a", 10), ("b", 10)]
    with pytest.raises(ValueError, match="unknown member 'z'"):
        lin.record(Event("z", "a", {}, {}, {}, 0.0, 1.0), 30)
    with pytest.raises(ValueError, match="step=5 of 'a' is before its last event's step 10"):
        lin.record(Event("a", "b", {}, {}, {}, 0.0, 1.0), 5)
    with pytest.raises(ValueError, match="format=None"):
        Lineage({}).load({})
