"""Boolean flags written with a value, on the command line: the switch names of the config
class that ``args`` will be parsed into (:func:`config_class_for`), rewritten by
:func:`jaxsrl.experiment.switches.normalize` (``--x=false`` -> ``--no_x``), which
:func:`jaxsrl.experiment.config.load_config` also applies.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from agents import AGENTS, get_agent
from jaxsrl.experiment.config import RunConfig, config_class
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.experiment.switches import WORDS, normalize, switch_names  # noqa: F401  (re-exported)


def config_class_for(args: Sequence[str]) -> type:
    """The config dataclass that ``args`` will be parsed into (its agent: ``--agent``, or
    with ``--resume`` the run's own); :class:`RunConfig` when the agent cannot be found
    (the parser then reports that)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--agent")
    pre.add_argument("--logdir", default="")
    known, _ = pre.parse_known_args(list(args))
    name = known.agent
    if name is None and "--resume" in args and known.logdir:
        run = RunDir(known.logdir)
        try:
            name = run.read_config().get("agent") if os.path.exists(run.config_path) else None
        except (OSError, ValueError):
            name = None
    try:
        agent = get_agent(name or RunConfig.agent, AGENTS)
        return config_class(agent.name, agent.config_cls)
    except (ValueError, ImportError, AttributeError):
        return RunConfig
