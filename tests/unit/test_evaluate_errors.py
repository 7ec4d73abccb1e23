"""``scripts/evaluate.py``'s refusals (exit 2, one line on stderr, the run folder left as it
was) for a checkpoint step that is no longer kept, a run without checkpoints and a run
folder without ``config.json``; the run folder is written directly (no training)."""

import importlib.util
import json
import os

import jax
import pytest

from agents import AGENTS
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs import env_spaces
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config, to_dict
from jaxsrl.experiment.run_dir import RunDir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _evaluate(argv):
    spec = importlib.util.spec_from_file_location(
        "evaluate_script", os.path.join(ROOT, "scripts", "evaluate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def _snapshot(path):
    """Every entry under ``path`` with its size and mtime (what a write would change)."""
    out = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), path)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory):
    """A PPO CartPole run folder whose checkpoint 10 was pruned (keeps only 20)."""
    logdir = tmp_path_factory.mktemp("pruned") / "run"
    cfg = load_config(["--env=CartPole-v1", f"--logdir={logdir}", "--ppo.hidden_sizes", "8"])
    os.makedirs(logdir)
    (logdir / "config.json").write_text(json.dumps(to_dict(cfg)))
    fns = AGENTS["ppo"].make(cfg.ppo, EnvSpec(*env_spaces(cfg.env, cfg.env_kwargs)), 1)
    state = {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)}
    ckpt = Checkpointer(RunDir(str(logdir)).checkpoint_dir("default"), max_to_keep=1)
    for step in (10, 20):
        ckpt.save(step, state, {"policy_version": step})
        ckpt.manager.wait_until_finished()
    ckpt.close()
    assert sorted(os.listdir(logdir / "checkpoints" / "default")) == ["20"]
    return str(logdir)


def test_a_pruned_step_is_still_a_step_of_its_policy(pruned_run):
    found, policy, step = RunDir.of_checkpoint(os.path.join(pruned_run, "checkpoints", "default", "10"))
    assert (os.path.abspath(found.path), policy, step) == (os.path.abspath(pruned_run), "default", 10)


def test_a_pruned_checkpoint_names_the_step_the_run_and_the_kept_steps(pruned_run, capsys):
    before = _snapshot(pruned_run)
    code = _evaluate(["--checkpoint", os.path.join(pruned_run, "checkpoints", "default", "10"),
                      "--episodes", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "checkpoint 10 " in err and f"run folder {os.path.abspath(pruned_run)}:" in err
    assert "keeps 20 " in err and "config.json" not in err
    assert _snapshot(pruned_run) == before


@pytest.mark.parametrize("case", ["no_checkpoints", "empty_checkpoints", "no_config", "no_folder"])
def test_a_run_without_checkpoint_or_config_is_a_one_line_error(pruned_run, tmp_path, capsys, case):
    logdir = tmp_path / "run"
    if case != "no_folder":
        os.makedirs(logdir)
    if case in ("no_checkpoints", "empty_checkpoints"):
        (logdir / "config.json").write_text(open(os.path.join(pruned_run, "config.json")).read())
    if case in ("empty_checkpoints", "no_config"):
        os.makedirs(logdir / "checkpoints" / "default")
    before = _snapshot(logdir) if os.path.isdir(logdir) else None
    code = _evaluate(["--logdir", str(logdir), "--episodes", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(logdir) in err
    expected = {"no_checkpoints": "no checkpoint folder", "empty_checkpoints": "no checkpoint in",
                "no_config": "no run config", "no_folder": "no run folder"}[case]
    assert expected in err
    assert (_snapshot(logdir) if os.path.isdir(logdir) else None) == before


def test_an_unknown_policy_names_the_policies_the_run_has(pruned_run, capsys):
    before = _snapshot(pruned_run)
    code = _evaluate(["--checkpoint", os.path.join(pruned_run, "checkpoints", "other"),
                      "--episodes", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no checkpoint folder" in err and "this run's policies: default)" in err
    assert _snapshot(pruned_run) == before


def test_an_interrupted_evaluation_is_one_line_and_exit_130(monkeypatch, capsys, tmp_path):
    """Ctrl-C or SIGTERM while evaluating (``KeyboardInterrupt`` from the evaluation):
    exit code 130, one line, no ``--json`` written, and the caller's signal handlers back."""
    import signal  # noqa: PLC0415

    from jaxsrl.tools import evaluation  # noqa: PLC0415
    monkeypatch.setattr(evaluation, "load_run", lambda **kw: object())

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt("stop signal")
    monkeypatch.setattr(evaluation, "evaluate", interrupted)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    out = tmp_path / "eval.json"
    assert _evaluate(["--logdir", str(tmp_path), "--json", str(out)]) == 130
    assert capsys.readouterr().err.strip() == "evaluate.py: interrupted"
    assert not out.exists()
    assert {s: signal.getsignal(s) for s in before} == before
