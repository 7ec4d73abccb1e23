"""The mode-pair tier: every pair of run modes trains or is refused in one line.

Modes (one value per dimension): launcher ``local|serial|ray``, inference
``thread|process|inline``, two learner processes, the off-policy agent ``dqn`` (replay
buffers), a population of two, periodic evaluation. A pair is *accepted* when
``load_config`` takes its two flags (the refusal table, ``jaxsrl/experiment/modes.py``);
every accepted pair is covered by at least one short CartPole run of ``scripts/train.py``
(exit 0, rows in ``metrics.jsonl``); the runs are picked greedily so that one run covers
several pairs (:func:`plan_runs`). Every refused pair is asserted to be refused in one
line naming both flags, in-process, plus once through the command line (exit 2, no
traceback). Marked ``mode_pairs`` (``pytest -m mode_pairs``); the runs with Ray are
skipped where Ray is not installed.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import subprocess
import sys

import pytest

from jaxsrl.experiment.config import load_config

try:  # the one-node Ray cluster of the Ray tests (a module fixture), for the runs with Ray
    from test_ray_launcher import cluster  # noqa: F401
except pytest.skip.Exception:  # Ray is not installed: those runs are skipped
    @pytest.fixture(scope="module")
    def cluster():
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")

pytestmark = pytest.mark.mode_pairs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO_ROOT, "scripts", "train.py")

#: Env frames of each run.
STEPS = 1500
#: Flags of every run: small and short (2 actors of 4 envs, STEPS env frames, 16x16 nets).
COMMON = ["--env=CartPole-v1", "--num_actors=2", "--envs_per_actor=4", "--segment_length=16",
          "--batch_segments=8", "--log_interval_s=0.5", f"--total_env_steps={STEPS}",
          "--checkpoint_interval_s=600"]
#: dimension -> value -> flags; the first value of each is the default of a pair's run.
DIMENSIONS: dict[str, dict[str, list[str]]] = {
    "launcher": {"local": ["--launcher=local"], "serial": ["--launcher=serial"],
                 "ray": ["--launcher=ray"]},
    "inference": {"thread": ["--inference=thread"], "process": ["--inference=process"],
                  "inline": ["--inference=inline"]},
    "learner": {"1": [], "2": ["--num_learner_processes=2"]},
    "agent": {"ppo": ["--ppo.hidden_sizes", "16", "16"],
              "dqn": ["--agent=dqn", "--dqn.min_fill=200", "--dqn.capacity=4096",
                      "--dqn.batch_size=32", "--dqn.hidden_sizes", "16", "16"]},
    "population": {"0": [], "2": ["--population=2"]},
    "eval": {"0": [], "2": ["--eval_every=2", "--eval_episodes=1"]},
}
#: The modes of the tier: each value of a dimension other than its off value.
MODES = [(d, v) for d, values in DIMENSIONS.items() for v in values
         if (d, v) not in {("learner", "1"), ("agent", "ppo"), ("population", "0"), ("eval", "0")}]
#: How a refusal names each mode.
NAMED = {("launcher", "local"): "--launcher=local", ("launcher", "serial"): "--launcher=serial",
         ("launcher", "ray"): "--launcher=ray", ("inference", "thread"): "--inference=thread",
         ("inference", "process"): "--inference=process",
         ("inference", "inline"): "--inference=inline", ("learner", "2"): "--num_learner_processes=2",
         ("agent", "dqn"): "dqn", ("population", "2"): "--population",
         ("eval", "2"): "--eval_every=2"}
#: The pairs issue 29 names as run together by no test before this tier.
ISSUE_PAIRS = [(("launcher", "ray"), ("inference", "process")),
               (("launcher", "ray"), ("inference", "inline")),
               (("inference", "inline"), ("learner", "2")),
               (("inference", "process"), ("agent", "dqn")),
               (("launcher", "ray"), ("learner", "2")),
               (("launcher", "serial"), ("agent", "dqn")),
               (("inference", "inline"), ("eval", "2")),
               (("inference", "process"), ("population", "2"))]
PAIRS = [(a, b) for a, b in itertools.combinations(MODES, 2) if a[0] != b[0]]


def flags_of(run: dict[str, str]) -> list[str]:
    """The command line of ``run`` (dimension -> value; missing: the first value)."""
    out = list(COMMON)
    for dim, values in DIMENSIONS.items():
        out += values[run.get(dim, next(iter(values)))]
    return out


@functools.lru_cache(maxsize=None)
def _refusal(flags: tuple[str, ...]) -> str | None:
    try:
        load_config(list(flags))
    except ValueError as exc:
        return str(exc)
    return None


def refusal_of(run: dict[str, str]) -> str | None:
    """The one-line refusal of ``run``'s config, or ``None`` if it is accepted."""
    return _refusal(tuple(flags_of(run)))


def _cost(run: dict[str, str]) -> float:
    """A run's rough price: a Ray cluster's run most, then each mode it turns on."""
    return 3 * (run["launcher"] == "ray") + sum((d, v) in MODES for d, v in run.items())


def plan_runs(accepted: list, tries: int = 300) -> list[dict[str, str]]:
    """Few full runs (one value per dimension) that together hold every accepted pair,
    none holding a refused pair: greedy (the run holding most pairs not yet held) with
    random tie-breaks, ``tries`` times from a fixed seed; the fewest runs, then the
    cheapest (:func:`_cost`), win. Each inference mode needs three runs (two learner
    processes, DQN and a population exclude each other), so 9 is the least."""
    refused = {frozenset(p) for p in PAIRS} - {frozenset(p) for p in accepted}
    candidates = []
    for values in itertools.product(*(list(v) for v in DIMENSIONS.values())):
        run = dict(zip(DIMENSIONS, values))
        modes = [(d, v) for d, v in run.items() if (d, v) in MODES]
        if any(frozenset(p) in refused for p in itertools.combinations(modes, 2)):
            continue
        candidates.append((run, {_key(p) for p in itertools.combinations(modes, 2)}))
    rng = random.Random(0)
    best: list = []
    for _ in range(tries):
        todo, runs = {_key(p) for p in accepted}, []
        while todo:
            gain = max(len(pairs & todo) for _, pairs in candidates)
            assert gain, f"no accepted run holds {sorted(todo)}"
            run, pairs = rng.choice([c for c in candidates if len(c[1] & todo) == gain])
            runs.append(run)
            todo -= pairs
        if not best or (len(runs), sum(map(_cost, runs))) < (len(best), sum(map(_cost, best))):
            best = runs
    return best


def _key(pair) -> tuple:
    return tuple(sorted(pair, key=MODES.index))


@pytest.fixture(scope="module")
def verdicts() -> dict:
    """pair -> its refusal (``None``: accepted), each judged in-process by load_config."""
    out = {}
    for a, b in PAIRS:
        out[_key((a, b))] = refusal_of(dict([a, b]))
    return out


def _runs() -> list[dict[str, str]]:
    accepted = [_key(p) for p in PAIRS if refusal_of(dict(p)) is None]
    return sorted(plan_runs(accepted), key=_cost)


RUNS = _runs()


def test_every_pair_is_judged_and_the_issue_pairs_are_among_them(verdicts):
    assert len(verdicts) == len(PAIRS) == 39
    for pair in ISSUE_PAIRS:
        assert _key(pair) in verdicts
    covered = {_key(p) for run in RUNS
               for p in itertools.combinations([(d, v) for d, v in run.items() if (d, v) in MODES], 2)}
    accepted = {p for p, why in verdicts.items() if why is None}
    assert accepted <= covered


def test_refused_pairs_are_one_line_naming_both_flags(verdicts):
    refused = {p: why for p, why in verdicts.items() if why is not None}
    assert refused, "the table refuses some pairs of the tier"
    for (a, b), why in refused.items():
        assert "\n" not in why
        assert NAMED[a] in why and NAMED[b] in why, (a, b, why)


def test_a_refused_pair_on_the_command_line_exits_2_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, TRAIN, *flags_of({"launcher": "serial",
                                                            "inference": "process"}),
                          f"--logdir={tmp_path / 'run'}"],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAXSRL_PROGRESS": "0"})
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == ["train.py: error: --inference=process does not work with --launcher=serial: "
                     "the serial launcher runs every worker in this one process, but inference "
                     "servers would be processes"], out.stderr[-2000:]
    assert "Traceback" not in out.stderr and not os.path.exists(tmp_path / "run")


def _ray_env() -> dict:
    from test_ray_launcher import _env  # noqa: PLC0415
    return _env()


@pytest.mark.parametrize("run", RUNS, ids=["-".join(f"{d}={v}" for d, v in r.items()) for r in RUNS])
def test_mode_run_trains(run, tmp_path, request):
    """One short run of several modes at once: exit 0, metrics rows written."""
    logdir = tmp_path / "run"
    extra, env = [f"--logdir={logdir}"], dict(os.environ)
    if run["launcher"] == "ray":
        # The test cluster has 4 logical CPUs: the accelerator process, two servers and
        # two actors of a population with --inference=process fit at a quarter each.
        extra += [f"--ray_address={request.getfixturevalue('cluster')}", "--actor_cpus=0.25",
                  "--learner_cpus=0.25"]
        env = _ray_env()
    env.update(JAXSRL_PROGRESS="0", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, TRAIN, *flags_of(run), *extra], capture_output=True,
                         text=True, timeout=420, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    with open(logdir / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert rows and rows[-1]["env_steps"] >= STEPS, rows[-1:]
