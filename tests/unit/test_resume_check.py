"""``jaxsrl/experiment/resume.py`` without a run: which changed settings a refused
``--resume`` names, and what it leaves alone."""

import json
import os
import types

import jax
import pytest

from agents import get_agent
from jaxsrl.core.agent import EnvSpec
from jaxsrl.envs import env_spaces
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.config import load_config, to_dict
from jaxsrl.experiment.resume import ResumeRefused, changed_settings, check, commit_config
from jaxsrl.experiment.run_dir import RunDir

BASE = ["--ppo.hidden_sizes", "16", "16"]


def _setup(cfg):
    """What :func:`check` reads of ``wiring.agent_setup``'s result."""
    spec = EnvSpec(*env_spaces(cfg.env))
    flow = cfg.get_dataflow()
    fns_of = {t.name: get_agent(cfg.agent).make(cfg.ppo, spec, 10) for t in flow.trainers}
    return types.SimpleNamespace(flow=flow, fns_of=fns_of, spec=spec,
                                 updates={t.name: 10 for t in flow.trainers})


@pytest.fixture
def saved(tmp_path):
    """A run folder: config.json and one checkpoint of a 16 x 16 PPO on CartPole."""
    logdir = str(tmp_path / "run")
    cfg = load_config(BASE + [f"--logdir={logdir}"])
    RunDir(logdir).write_config(to_dict(cfg) | {"logdir": logdir})
    fns = next(iter(_setup(cfg).fns_of.values()))
    ckpt = Checkpointer(RunDir(logdir).checkpoint_dir(cfg.get_dataflow().trainers[0].policy))
    ckpt.save(3, {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(1)},
              {"policy_version": 3})
    ckpt.close()
    return logdir


def _snapshot(logdir):
    out = {}
    for root, _, files in os.walk(logdir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.join(root, name)] = f.read()
    return out


def test_only_the_settings_that_change_the_structure_are_named(saved):
    before = _snapshot(saved)
    cfg = load_config([f"--logdir={saved}", "--resume", "--ppo.hidden_sizes", "8", "8",
                       "--ppo.learning_rate=1e-5", "--ppo.num_epochs=3"])
    with pytest.raises(ResumeRefused) as refused:
        check(cfg, _setup(cfg), saved)
    message = str(refused.value)
    assert message.startswith(f"cannot resume {saved}: changes the learner state's structure: "
                              "ppo.hidden_sizes [16, 16] -> [8, 8] (checkpoint 3 of ")
    assert "learning_rate" not in message and "num_epochs" not in message
    assert "\n" not in message
    assert _snapshot(saved) == before


def test_hyperparameters_and_budgets_pass(saved):
    cfg = load_config([f"--logdir={saved}", "--resume", "--ppo.learning_rate=1e-5",
                       "--total_env_steps=9000"])
    check(cfg, _setup(cfg), saved)  # no error


def test_commit_keeps_the_previous_config_and_names_the_changes(saved):
    old = RunDir(saved).read_config()
    cfg = load_config([f"--logdir={saved}", "--resume", "--ppo.learning_rate=1e-5"])
    new = to_dict(cfg) | {"logdir": saved}
    assert changed_settings(old, new) == {"ppo.learning_rate": (old["ppo"]["learning_rate"], 1e-5)}
    commit_config(saved, new)
    assert RunDir(saved).read_config()["ppo"]["learning_rate"] == 1e-5
    with open(os.path.join(saved, "config.1.json")) as f:
        assert json.load(f) == old
    commit_config(saved, new)  # the same again: nothing to keep
    assert not os.path.exists(os.path.join(saved, "config.2.json"))


def test_a_resume_whose_budget_is_already_reached_says_so(tmp_path):
    """Every policy's newest checkpoint counts >= total_env_steps: a one-line note; one
    policy short of it, or no readable count: none."""
    from jaxsrl.experiment.resume import budget_reached

    def meta(policy, step, env_steps):
        folder = tmp_path / "checkpoints" / policy / str(step) / "meta"
        folder.mkdir(parents=True)
        (folder / "metadata").write_text(json.dumps({"policy_version": step, "env_steps": env_steps}))

    meta("hider", 3, 4_000)
    meta("hider", 5, 10_240)
    meta("seeker", 5, 10_240)
    note = budget_reached(str(tmp_path), 10_000)
    assert note is not None and "10,240 env steps" in note and "--total_env_steps=10,000" in note
    assert budget_reached(str(tmp_path), 20_000) is None
    meta("other", 2, 900)
    assert budget_reached(str(tmp_path), 10_000) is None  # one policy has steps to go
    assert budget_reached(str(tmp_path / "nothing"), 10) is None


def test_an_unreadable_budget_count_is_no_note(tmp_path):
    """Metadata that is deeply nested JSON (RecursionError) or counts Infinity steps
    (OverflowError in int()) reads as no count, not as a crash of the resume."""
    from jaxsrl.experiment.resume import budget_reached

    folder = tmp_path / "checkpoints" / "default" / "3" / "meta"
    folder.mkdir(parents=True)
    for text in ("[" * 100_000 + "]" * 100_000, '{"env_steps": Infinity}'):
        (folder / "metadata").write_text(text)
        assert budget_reached(str(tmp_path), 10) is None
