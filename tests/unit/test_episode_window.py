"""Episode statistics over a fixed window (``jaxsrl/experiment/metrics.py``,
:data:`~jaxsrl.experiment.metrics.EPISODE_WINDOW`): a record's ``episode_return_mean``,
``episode_length_mean``, ``episode/<stat>`` and their ``/<team>`` copies are the means of
the last 100 finished episodes that reported each key, whenever the record is taken,
on both placements (CPU actors: ``add_episode``; device actors: the rollout's
:class:`~jaxsrl.workers.device.rollout.EpisodeStats` through ``finished_episodes`` and
``add_episodes``), and ``--target_return`` stops on that window."""

from __future__ import annotations

import collections
import types

import numpy as np
import pytest

from jaxsrl.experiment.metrics import EPISODE_WINDOW, MetricsAccumulator
from jaxsrl.workers.device.rollout import EpisodeStats, finished_episodes
from jaxsrl.workers.population.fitness import FitnessTracker

KEYS = {"return": "episode_return_mean", "length": "episode_length_mean"}


def _stream(seed: int = 0, n: int = 700) -> list:
    """``(kind, payload)`` calls as the workers make them: single episodes (some with an
    extra statistic, some also as a team copy) and device batches (arrays, often empty)."""
    rng = np.random.default_rng(seed)
    calls = []
    while len(calls) < n:
        if rng.random() < 0.7:
            episode = {"return": float(rng.normal(50, 30)), "length": int(rng.integers(1, 500))}
            if rng.random() < 0.5:
                episode["boxes"] = float(rng.integers(0, 3))
            calls.append(("one", episode, ""))
            if rng.random() < 0.3:
                calls.append(("one", {k: episode[k] for k in ("return", "length")}, "/hider"))
        else:
            e = int(rng.choice([0, 1, 3, 40, 250]))
            calls.append(("many", rng.normal(80, 20, e).astype(np.float32),
                          rng.integers(1, 500, e).astype(np.int32)))
    return calls


def _apply(metrics: MetricsAccumulator, call: tuple) -> None:
    if call[0] == "one":
        metrics.add_episode(call[1], suffix=call[2])
    else:
        metrics.add_episodes(call[1], call[2])


class _Reference:
    """The last 100 values of each record key, as plain Python lists."""

    def __init__(self):
        self.values: dict = collections.defaultdict(list)
        self.episodes = collections.Counter()

    def add(self, call: tuple) -> None:
        if call[0] == "one":
            for key, value in call[1].items():
                self.values[KEYS.get(key, f"episode/{key}") + call[2]].append(float(value))
            self.episodes["episodes" + call[2]] += 1
        else:
            self.values["episode_return_mean"].extend(float(r) for r in call[1])
            self.values["episode_length_mean"].extend(float(n) for n in call[2])
            self.episodes["episodes"] += len(call[1])

    def record(self) -> dict:
        out = {k: sum(v[-100:]) / len(v[-100:]) for k, v in self.values.items() if v}
        return out | dict(self.episodes)


def _episode_part(record: dict) -> dict:
    return {k: v for k, v in record.items() if k.startswith(("episode", "episodes"))}


def test_the_window_is_the_last_100_episodes_whenever_the_record_is_taken():
    """Two accumulators fed the same calls, one snapshotted at random points (some
    intervals empty, some holding hundreds of episodes), one only at the end: every
    record's episode statistics are the reference's (the last 100 per key, plain lists),
    and the two final records are equal."""
    assert EPISODE_WINDOW == 100
    calls, rng = _stream(), np.random.default_rng(1)
    often, once, ref = MetricsAccumulator(), MetricsAccumulator(), _Reference()
    snapshots = 0
    for call in calls:
        _apply(often, call)
        _apply(once, call)
        ref.add(call)
        if rng.random() < 0.05:
            assert _episode_part(often.snapshot(1.0)) == pytest.approx(ref.record(), rel=1e-6)
            snapshots += 1
    assert snapshots > 10
    assert _episode_part(often.snapshot(1.0)) == pytest.approx(ref.record(), rel=1e-6)
    assert _episode_part(once.snapshot(7.0)) == _episode_part(often.snapshot(0.5))
    assert len(ref.values["episode_return_mean"]) > 1000  # many windows' worth went by


def test_non_finite_values_stay_out_of_the_window_and_bad_arrays_are_refused():
    metrics = MetricsAccumulator()
    metrics.add_episode({"return": 1.0, "length": 3})
    metrics.add_episode({"return": float("nan"), "length": 5})
    metrics.add_episodes(np.float32([3.0, np.inf]), np.int32([7, 9]))
    record = metrics.snapshot(1.0)
    assert record["episode_return_mean"] == 2.0 and record["episode_length_mean"] == 6.0
    assert record["episodes"] == 4
    metrics.add_episodes(np.zeros(0), np.zeros(0))  # a step without episodes: nothing
    assert _episode_part(metrics.snapshot(1.0)) == _episode_part(record)
    with pytest.raises(ValueError, match="1-D"):
        metrics.add_episodes(np.zeros((2, 3)), np.zeros((2, 3)))  # unconverted [N, T]
    with pytest.raises(ValueError, match="1-D"):
        metrics.add_episodes(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="1-D"):
        metrics.add_episodes(3, 36.0)  # the former (count, sum) call


def test_finished_episodes_come_in_the_order_they_finished():
    """``[..., N, T]`` fields: leading axis first, then step, then row (a Python loop
    over the same arrays is the reference); the counts and sums the fields give agree."""
    rng = np.random.default_rng(0)
    K, N, T = 3, 5, 7
    done = rng.random((K, N, T)) < 0.3
    ret = np.where(done, rng.normal(size=(K, N, T)), 0).astype(np.float32)
    length = np.where(done, rng.integers(1, 100, (K, N, T)), 0).astype(np.int32)
    expected = [(ret[k, n, t], length[k, n, t]) for k in range(K) for t in range(T)
                for n in range(N) if done[k, n, t]]
    returns, lengths = finished_episodes(EpisodeStats(done, ret, length))
    assert returns.dtype == np.float32 and lengths.dtype == np.int32
    assert list(zip(returns.tolist(), lengths.tolist())) == [(float(r), int(n)) for r, n in expected]
    one = EpisodeStats(done[1], ret[1], length[1])
    assert len(finished_episodes(one)[0]) == int(one.count) == int(done[1].sum())
    assert float(one.return_sum) == pytest.approx(float(finished_episodes(one)[0].sum()), rel=1e-6)
    np.testing.assert_array_equal(EpisodeStats(done, ret, length).count, done.sum(axis=(1, 2)))
    with pytest.raises(ValueError, match=r"\[\.\.\., N, T\]"):
        finished_episodes(EpisodeStats(done[0, 0], ret[0, 0], length[0, 0]))


def test_a_device_rollout_reports_each_finished_episode():
    """A CartPole rollout (``tests/jax_cartpole.py``, reward 1 a step): every episode's return equals its
    length, and they are those ``done`` marks; fed to the accumulator they are its window."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    from jaxsrl.envs.jax_native import registry  # noqa: PLC0415
    from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout  # noqa: PLC0415
    env = registry.make("jax:jax_cartpole:make")
    n_act = int(env.action_space.n)

    def act(params, obs, carry, rng):
        del params, carry
        action = jax.random.randint(rng, (obs.shape[0],), 0, n_act)
        return action, None, {"logp": jnp.zeros((obs.shape[0],), jnp.float32)}

    N, T = 8, 64
    rollout = jax.jit(make_rollout(env, act, T))
    carry = initial_rollout_carry(env, jax.random.PRNGKey(0), N)
    _, traj, stats = rollout(None, carry, jax.random.PRNGKey(1), jnp.int32(0))
    stats = jax.device_get(stats)
    assert np.asarray(stats.done).shape == (N, T)
    np.testing.assert_array_equal(stats.done, np.asarray(traj.terminated) | np.asarray(traj.truncated))
    returns, lengths = finished_episodes(stats)
    assert len(returns) == int(stats.count) > N  # random play: ~20-step episodes
    np.testing.assert_array_equal(returns, lengths.astype(np.float32))
    metrics = MetricsAccumulator()
    metrics.add_episodes(returns, lengths)
    last = lengths[-EPISODE_WINDOW:]
    assert metrics.snapshot(1.0)["episode_length_mean"] == pytest.approx(last.mean(), rel=1e-9)


def test_member_episodes_as_arrays_record_as_one_call_per_episode():
    """A population member's device episodes (arrays) give the run's record and the
    member's fitness of one ``add_episode`` each."""
    from jaxsrl.launch.population import MemberMetrics  # noqa: PLC0415
    episodes = [(5.0, 5), (12.0, 12), (31.0, 31)]
    out = []
    for as_arrays in (False, True):
        base, tracker = MetricsAccumulator(), FitnessTracker(["member0"])
        mm = MemberMetrics(base, "member0", tracker)
        if as_arrays:
            mm.add_episodes(np.float32([r for r, _ in episodes]), np.int32([n for _, n in episodes]))
        else:
            for r, n in episodes:
                mm.add_episode({"return": r, "length": n})
        mm.add_episodes(np.zeros(0, np.float32), np.zeros(0, np.int32))  # no episodes: no change
        out.append((base.snapshot(1.0), tracker.take()))
    assert out[0] == out[1]
    assert out[1][0]["population/return/member0"] == 16.0 and out[1][0]["episodes"] == 3


def _control_loop(metrics: MetricsAccumulator, target: float):
    """The launcher's control loop around ``metrics``, logging on every call (interval
    0 s); only what ``_log_metrics`` reads (its supervision is not under test)."""
    from jaxsrl.launch.control import ControlLoop  # noqa: PLC0415
    written = []
    cfg = types.SimpleNamespace(total_env_steps=10**9, log_interval_s=0.0, target_return=target)
    run = types.SimpleNamespace(cfg=cfg, metrics=metrics, clock=lambda: 1.0,
                                writer=types.SimpleNamespace(write=written.append, progress=object()))
    loop = ControlLoop.__new__(ControlLoop)
    loop.run, loop.last_log, loop.record = run, 0.0, {}
    return loop, written


def test_target_return_stops_when_the_window_mean_reaches_it():
    """CartPole's 475 after 100 episodes of 20: a few 500-step episodes in one interval
    (the interval's mean 500) do not stop the run; it stops at the first record whose
    last 100 episodes average 475 or more (the reference: a plain list), also when that
    record's interval finished no episode."""
    metrics, history = MetricsAccumulator(), []
    loop, written = _control_loop(metrics, target=475.0)

    def add(returns):
        history.extend(returns)
        metrics.add_episodes(np.float32(returns), np.int32(returns))

    add([20.0] * 100)
    assert not loop._log_metrics()
    add([500.0] * 5)  # this interval's mean is 500
    assert not loop._log_metrics()
    assert written[-1]["episode_return_mean"] == pytest.approx(np.mean(history[-100:]))
    assert written[-1]["episode_return_mean"] < 475.0
    stopped_at = None
    for step in range(200):
        add([500.0] * 3)
        if loop._log_metrics():
            stopped_at = step
            break
        assert np.mean(history[-100:]) < 475.0
    assert stopped_at is not None
    assert written[-1]["episode_return_mean"] == pytest.approx(np.mean(history[-100:]))
    assert written[-1]["episode_return_mean"] >= 475.0
    assert np.mean(history[-103:-3]) < 475.0  # it stopped at the first such record

    quiet, _ = _control_loop(metrics, target=475.0)  # no episode in this interval
    assert quiet._log_metrics()


def test_target_return_is_checked_between_records_too():
    """A log interval far longer than the run (3,600 s): the loop still stops on the turn
    the window's mean reaches the target, writing that record, not at the next interval
    (a run's stop no longer depends on --log_interval_s)."""
    metrics = MetricsAccumulator()
    loop, written = _control_loop(metrics, target=475.0)
    loop.run.cfg.log_interval_s = 3600.0
    loop.last_log = 1.0  # a record was just written
    metrics.add_episodes(np.float32([20.0] * 100), np.int32([20] * 100))
    assert not loop._log_metrics() and not written  # not due, not reached
    metrics.add_episodes(np.float32([500.0] * 100), np.int32([500] * 100))
    assert loop._log_metrics()
    assert written[-1]["episode_return_mean"] == 500.0
