"""README.md's ``scripts/train.py`` commands use only flags the train command line has.

The valid flags are derived from the config dataclasses ``load_config`` hands to tyro (not
from ``--help``'s text): the fields of :class:`jaxsrl.experiment.config.RunConfig` and of
the agent's config dataclass (``--<agent>.<field>``), nested dataclasses as
``--<field>.<subfield>``, ``--no_<field>`` for booleans (tyro's negation), less the
fields tyro is told to suppress, plus the flags the pre-parser takes (``--agent``,
``--env``, ``--config``, ``--logdir``, ``--resume``), ``--env_kwargs.<key>`` and the
aliases of ``jaxsrl.experiment.modes.ALIAS_FLAGS``.
"""

import dataclasses
import os
import re
import shlex
import typing

import pytest
import tyro

from agents import AGENTS
from jaxsrl.experiment.config import RunConfig
from jaxsrl.experiment.modes import ALIAS_FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRE_PARSER = {"--agent", "--env", "--config", "--logdir", "--resume", "--help", "-h"}


def dataclass_flags(cls: type, prefix: str = "") -> set[str]:
    """``--<prefix><field>`` for every field tyro makes a flag of (see module docstring)."""
    flags = set()
    hints = typing.get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) is typing.Annotated:
            if tyro.conf.Suppress in hint.__metadata__:
                continue
            hint = typing.get_args(hint)[0]
        if dataclasses.is_dataclass(hint):
            flags |= dataclass_flags(hint, f"{prefix}{field.name}.")
            continue
        flags.add(f"--{prefix}{field.name}")
        if hint is bool:
            flags.add(f"--{prefix}no_{field.name}")
    return flags


def train_flags(agent: str | None) -> set[str]:
    """The flags of ``train.py --agent=<agent>`` (``None``: any built-in agent's)."""
    names = sorted(AGENTS) if agent is None else [agent]
    flags = dataclass_flags(RunConfig) | PRE_PARSER | set(ALIAS_FLAGS)
    for name in names:
        flags |= dataclass_flags(AGENTS[name].config_cls, f"{name}.")
    return flags


def train_commands(markdown: str) -> list[list[str]]:
    """The ``scripts/train.py`` commands of ``markdown``'s ```bash blocks and inline code
    spans, as argument lists (continuation lines joined, comments dropped)."""
    texts = [b.replace("\\\n", " ") for b in re.findall(r"^```bash\n(.*?)^```", markdown, re.M | re.S)]
    texts += re.findall(r"`(python scripts/train\.py [^`]*)`", markdown)
    commands = []
    for text in texts:
        for line in text.splitlines():
            for part in re.split(r"&&|;", line):
                words = shlex.split(part, comments=True)
                if "scripts/train.py" in words:
                    commands.append(words[words.index("scripts/train.py") + 1:])
    return commands


def bad_flags(args: list[str]) -> list[str]:
    """The flags of one train command line that the command line does not have, and
    ``--config`` files that do not exist."""
    given = dict(a.split("=", 1) if "=" in a else (a, "") for a in args if a.startswith("--"))
    agent = given.get("--agent") or (None if "--resume" in given else "ppo")
    valid = train_flags(agent)
    bad = [f for f in given if f not in valid and not f.startswith("--env_kwargs.")]
    for i, a in enumerate(args):
        path = a.split("=", 1)[1] if a.startswith("--config=") else (
            args[i + 1] if a == "--config" and i + 1 < len(args) else None)
        if path is not None and not os.path.isfile(os.path.join(ROOT, path)):
            bad.append(f"--config {path} (no such file)")
    return bad


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_readme_has_train_commands():
    commands = train_commands(_readme())
    assert len(commands) >= 5, commands
    assert ["--agent=ppo", "--env=hide_and_seek"] in commands  # the quick start


@pytest.mark.parametrize("args", train_commands(_readme()), ids=" ".join)
def test_readme_train_flags_exist(args):
    bad = bad_flags(args)
    assert not bad, f"README.md: python scripts/train.py {' '.join(args)}: no such flag {bad}"


def test_a_bogus_flag_is_caught():
    md = ("```bash\npython scripts/train.py --agent=sac --env=HalfCheetah-v5 \\\n"
          "    --sac.policy_lr=3e-4 --ppo.clip_eps=0.1 --num_actorz=2  # comment --x\n```\n")
    (args,) = train_commands(md)
    assert bad_flags(args) == ["--ppo.clip_eps", "--num_actorz"]
    assert bad_flags(["--config=configs/nope.toml"]) == ["--config configs/nope.toml (no such file)"]


def test_derived_flags_include_nested_and_negated_ones():
    flags = train_flags("ppo")
    assert {"--total_env_steps", "--ppo.learning_rate", "--no_clip_actions", "--inline_inference",
            "--pbt.ready_env_steps", "--ppo.anneal_lr", "--ppo.no_anneal_lr"} <= flags
    assert "--sac.policy_lr" not in flags and "--sac.policy_lr" in train_flags(None)
    assert "--env_kwargs" not in flags and "--dataflow" not in flags  # suppressed
