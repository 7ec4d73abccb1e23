"""``train.py --help``: the run's flags in groups, as plain text, with the values that the
rest of the command line (``--env``, ``--agent``, ``--config``, other flags) resolves to.

:data:`GROUPS` assigns every field of :class:`jaxsrl.experiment.config.RunConfig` to one
group (a test checks that none is missing or listed twice); the agent's hyperparameters
(``--<Agent.name>.<field>``) form a group of their own. Each flag's text is its field's
docstring (:mod:`jaxsrl.cli.field_docs`), without reST markup.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import textwrap
import typing
from typing import Any, Literal, Sequence

import tyro

from jaxsrl.cli.field_docs import field_docs
from jaxsrl.core.paths import CONFIG_DIR
from jaxsrl.experiment import config_layers as layers
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.experiment.sections import SECTIONS

#: Group title -> the run fields shown in it, in order: the config's sections
#: (:data:`jaxsrl.experiment.sections.SECTIONS`). A dataclass-valued field (``pbt``,
#: ``opponents``) stands for its own fields, ``--<field>.<name>``.
GROUPS: dict[str, tuple[str, ...]] = {s.title: s.fields for s in SECTIONS}

#: Where the agent's hyperparameters go (after this group).
AGENT_GROUP_AFTER = "learner"

#: Entries that are not fields of the config dataclass (the pre-parser takes them).
EXTRA = {"run": [("--config FILE",
                  "A TOML file layered over configs/<env>.toml, repeatable: top-level keys "
                  "set run fields, the [<agent>] table the agent's hyperparameters, "
                  "[env_kwargs] and [dataflow] those fields; a section's table "
                  "([inference], [actors], ...) sets its flags by name.", None)]}
#: The same, shown after the group's fields.
EXTRA_AFTER = {"inference": [
    ("--remote_inference, --no_remote_inference",
     "Older spelling of --inference=process (--no_: thread where it was process).", None),
    ("--inline_inference, --no_inline_inference",
     "Older spelling of --inference=inline (--no_: thread); --inference=server is thread too.",
     None)]}

#: How a field that is not a plain flag is given.
SPECIAL = {"env_kwargs": "--env_kwargs.KEY=VALUE",
           "dataflow": "[dataflow] table (TOML files only)"}


def usage_text() -> str:
    return "usage: train.py [-h] [--agent=NAME] [--env=ID] [--config=FILE]... [FLAG]..."


def description(agents: Sequence[str]) -> str:
    return ("Train an agent. Values resolve in this order, later wins: dataclass defaults, "
            "configs/<env>.toml, configs/<agent>/<env>.toml (with --resume: LOGDIR/config.json), "
            "each --config FILE in order, then flags. "
            "Switches are --x or --no_x; --x=true and --x=false work too. "
            f"Built-in agents: {', '.join(sorted(agents))}; or --agent=package.module:AGENT.")


def shown_for(cfg: Any, args: Sequence[str]) -> str:
    """The sentence saying which command line and files the shown defaults belong to."""
    run = RunDir(cfg.logdir) if cfg.resume and cfg.logdir else None
    if run is not None and os.path.exists(run.config_path):
        files = [run.config_path]
    else:
        files = [os.path.join("configs", os.path.relpath(p, CONFIG_DIR))
                 for p in (layers.config_file_for(cfg.env),
                           layers.agent_config_file_for(cfg.env, cfg.agent_field))
                 if os.path.exists(p)]
    given = f"what the flags {' '.join(args)} resolve to" if args else "the plain defaults"
    source = f", after {' and '.join(files)}" if files else ""
    return (f"Defaults shown: {given} (--agent={cfg.agent} "
            f"--env={cfg.env}{source}). Put --env, --agent, --config or any flag before "
            "--help to see the values it gives.")


def render(cfg: Any, args: Sequence[str], agents: Sequence[str], width: int | None = None) -> str:
    """The whole help text for the resolved config ``cfg`` of the flags ``args``.

    Args:
      cfg: a resolved run config (``load_config(args)``); its values are the defaults shown.
      args: the flags other than ``--help`` (named in the text).
      agents: names of the built-in agents.
      width: line width (default: the terminal's, at most 100).
    """
    if width is None:
        width = min(shutil.get_terminal_size((80, 24)).columns, 100) - 2
    width = max(width, 40)
    wrap = textwrap.TextWrapper(width=width)
    body = textwrap.TextWrapper(width=width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    out = [usage_text(), ""]
    out += wrap.wrap(description(agents)) + [""]
    out += wrap.wrap(shown_for(cfg, args))
    for title, entries in _groups(cfg):
        out += ["", f"{title}:"]
        for heading, text, default in entries:
            line = f"  {heading}" if default is None else f"  {heading}  (default: {default})"
            if len(line) > width:  # the default opens the text instead
                line, text = f"  {heading}", f"(default: {default}) {text}"
            out.append(line)
            if text:
                out += body.wrap(text)
    return "\n".join(out) + "\n"


def _groups(cfg: Any) -> list[tuple[str, list[tuple[str, str, str | None]]]]:
    """``[(title, [(flag heading, plain text, shown default or None), ...]), ...]``."""
    cls = type(cfg)
    docs = field_docs(cls)
    groups = []
    for title, names in GROUPS.items():
        entries = list(EXTRA.get(title, []))
        for name in names:
            value = getattr(cfg, name)
            if dataclasses.is_dataclass(value):
                entries += _entries(value, f"{name}.")
            else:
                entries.append(_entry(cls, name, value, docs.get(name, ""), ""))
        entries += EXTRA_AFTER.get(title, [])
        groups.append((title, entries))
        if title == AGENT_GROUP_AFTER:
            agent = cfg.agent_config()
            groups.append((f"agent hyperparameters, --{cfg.agent_field}.* "
                           f"({type(agent).__name__})", _entries(agent, f"{cfg.agent_field}.")))
    return groups


def _entries(obj: Any, prefix: str) -> list[tuple[str, str, str | None]]:
    docs = field_docs(type(obj))
    return [_entry(type(obj), f.name, getattr(obj, f.name), docs.get(f.name, ""), prefix)
            for f in dataclasses.fields(obj)]


def _entry(cls: type, name: str, value: Any, text: str, prefix: str) -> tuple[str, str, str | None]:
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    if name in SPECIAL and not prefix:
        return SPECIAL[name], text, None
    if typing.get_origin(hint) is typing.Annotated:
        if any(m is tyro.conf.Suppress for m in typing.get_args(hint)[1:]):
            return f"[{prefix}{name}] table (TOML files only)", text, None
        hint = typing.get_args(hint)[0]
    if hint is bool:
        return f"--{prefix}{name}, --{prefix}no_{name}", text, str(value)
    return f"--{prefix}{name} {metavar(hint)}", text, shown(value)


def metavar(hint: Any) -> str:
    """How a value of type ``hint`` is written: ``INT``, ``{a,b}``, ``FLOAT [FLOAT ...]``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        one = metavar(args[0])
        return f"{one} [{one} ...]"
    if origin is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return "|".join(metavar(a) for a in rest) + "|None"
    return getattr(hint, "__name__", str(hint)).upper()


def shown(value: Any) -> str:
    """A default as it would be typed on the command line."""
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value) if value else "()"
    if value == "":
        return '""'
    return str(value)
