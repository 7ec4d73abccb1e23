"""``train.py --help``: flags in groups, plain text, the defaults the other flags resolve
to; boolean flags written with a value (``--ppo.anneal_lr=false``)."""

import collections
import dataclasses
import os
import re
import subprocess
import sys

import pytest

from agents import AGENTS
from jaxsrl.cli import help as help_lib
from jaxsrl.experiment import switches
from jaxsrl.cli.field_docs import plain
from jaxsrl.cli.train import parse
from jaxsrl.experiment.config import RunConfig, config_class

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REST = re.compile(r"``|:(func|class|mod|meth|data|attr):`")


def _cli_help(*flags):
    """stdout of ``scripts/train.py FLAGS --help`` at 80 columns."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": ROOT, "JAXSRL_PROGRESS": "0"}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"), *flags,
                          "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _default(text, flag):
    """The ``(default: X)`` shown on the heading line of ``flag``."""
    match = re.search(rf"^  {re.escape(flag)}\b[^\n]*\(default: ([^)]*)\)$", text, re.M)
    assert match, f"{flag} has no heading line with a default"
    return match.group(1)


def test_help_is_grouped_plain_text_that_names_its_env():
    text = _cli_help()
    headings = [line[:-1] for line in text.splitlines() if re.fullmatch(r"\S.*:", line)]
    for group in ("run", "actors", "inference", "learner", "evaluation", "network and cluster",
                  "run folder, metrics and checkpoints",
                  "agent hyperparameters, --ppo.* (PPOConfig)"):
        assert group in headings, group
    assert not REST.search(text), REST.search(text)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "--agent=ppo --env=CartPole-v1" in text  # says whose defaults these are
    assert _default(text, "--segment_length INT") == "32"
    assert len(text.splitlines()) < 360  # was 404 lines in one box


def test_help_shows_the_defaults_the_env_resolves_to():
    text = _cli_help("--env=hide_and_seek")
    assert "--env=hide_and_seek, after configs/hide_and_seek.toml" in text
    assert _default(text, "--segment_length INT") == "20"  # CartPole-v1: 32
    assert _default(text, "--envs_per_actor INT") == "8"
    assert _default(text, "--ppo.network STR") == "entity_lstm"
    assert _default(text, "--ppo.anneal_lr, --ppo.no_anneal_lr") == "False"


def test_help_shows_config_file_and_flag_values(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("num_actors = 5\n[ppo]\nnum_epochs = 9\n")
    args = [f"--config={toml}", "--seed=7"]
    text = help_lib.render(parse(args), args, list(AGENTS), width=78)
    assert _default(text, "--num_actors INT") == "5"
    assert _default(text, "--ppo.num_epochs INT") == "9"
    assert _default(text, "--seed INT") == "7"


def test_every_run_field_is_in_exactly_one_group():
    listed = collections.Counter(name for names in help_lib.GROUPS.values() for name in names)
    assert [name for name, n in listed.items() if n > 1] == []
    assert set(listed) == {f.name for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_every_flag_of_every_agent_has_plain_help(agent):
    cfg = parse([f"--agent={agent}"])
    entries = [entry for _, group in help_lib._groups(cfg) for entry in group]
    assert [heading for heading, text, _ in entries if not text] == []
    assert [text for _, text, _ in entries if REST.search(text)] == []
    flags = {heading.split()[0].rstrip(",") for heading, _, _ in entries}
    assert f"--{agent}.learning_rate" in flags or f"--{agent}.q_lr" in flags, sorted(flags)


def test_plain_drops_rest_markup_across_lines():
    assert plain("over ``a *\n   b`` steps; :func:`x.f`, :class:`~y.C`") == \
        "over a * b steps; x.f, y.C"


@pytest.mark.parametrize("flags, want", [
    (["--ppo.anneal_lr=false"], False),
    (["--ppo.anneal_lr=False"], False),
    (["--ppo.anneal_lr", "false"], False),
    (["--ppo.no_anneal_lr=false"], True),
    (["--env=hide_and_seek", "--ppo.anneal_lr=TRUE"], True),  # the file sets it false
    (["--ppo.no_anneal_lr"], False),
    (["--env=hide_and_seek", "--ppo.anneal_lr"], True),
])
def test_switches_take_true_or_false(flags, want):
    assert parse(flags).ppo.anneal_lr is want


def test_run_and_other_agents_switches_take_values():
    assert parse(["--clip_actions=false"]).clip_actions is False
    assert parse(["--no_clip_actions"]).clip_actions is False
    assert parse(["--clip_actions=1"]).clip_actions is True
    assert parse(["--inline_inference=true"]).inference == "inline"
    assert parse(["--inline_inference=false"]).inference == "thread"
    assert parse(["--remote_inference=true"]).inference == "process"
    assert parse(["--agent=dqn", "--dqn.double=false"]).dqn.double is False


def test_a_switch_with_another_value_says_how_to_write_it():
    with pytest.raises(ValueError, match=r"--ppo\.anneal_lr or --ppo\.no_anneal_lr"):
        parse(["--ppo.anneal_lr=maybe"])


def test_values_of_other_flags_are_left_alone():
    names = switches.switch_names(config_class("ppo", AGENTS["ppo"].config_cls))
    assert {"clip_actions", "ppo.anneal_lr", "resume"} <= names
    args = ["--logdir=false", "--env_kwargs.render=false", "--host", "true", "--seed=1"]
    assert switches.normalize(args, names) == args


def test_load_config_takes_switch_values_for_every_caller():
    """Sweeps, seeds and the bench call ``load_config`` directly: the value forms work there too."""
    from jaxsrl.experiment.config import load_config

    cfg = load_config(["--env=CartPole-v1", "--ppo.anneal_lr=false", "--clip_actions", "true"])
    assert cfg.ppo.anneal_lr is False and cfg.clip_actions is True
    with pytest.raises(ValueError, match="--ppo.no_anneal_lr"):
        load_config(["--env=CartPole-v1", "--ppo.anneal_lr=maybe"])
