"""Load a trained run for evaluation: its config, its agent and its newest (or a given)
checkpoint of each policy.

The run is rebuilt from ``LOGDIR/config.json`` (agent name, env, env_kwargs and the
agent's hyperparameters under the key named after the agent) and the Orbax
checkpoints of ``LOGDIR/checkpoints/<policy>/<step>`` (``{"agent": state, "rng": key}``,
the layout of :class:`jaxsrl.experiment.run_dir.RunDir`)::

    run = load_run(logdir="runs/cp")   # newest checkpoint(s)

:mod:`jaxsrl.tools.evaluation` runs episodes with the loaded policies.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from typing import Any, Callable

import jax

from agents import get_agent
from jaxsrl.core.agent import Agent, AgentFns
from jaxsrl.experiment.agent_build import agent_factory
from jaxsrl.experiment.checkpoint import Checkpointer, finalised_steps
from jaxsrl.experiment.dataflow import Dataflow, default_dataflow
from jaxsrl.experiment.population import population_dataflow
from jaxsrl.experiment.run_dir import RunDir

log = logging.getLogger("jaxsrl.tools.run_loader")


# ----------------------------------------------------------------------------------
# Loading a run.


@dataclasses.dataclass
class PolicyCheckpoint:
    """The parameters of one policy and where they came from."""

    name: str
    path: str
    step: int
    meta: dict
    params: Any


@dataclasses.dataclass
class LoadedRun:
    """A trained run rebuilt for evaluation.

    Attributes:
      config: the run's ``config.json``.
      agent: the registered agent.
      agent_config: the agent's hyperparameters (its config dataclass).
      fns: the agent's pure functions (``act``, ``initial_carry``).
      policies: policy name -> its restored checkpoint.
      team_policy: team -> policy name; the key ``None`` means "every agent".
    """

    config: dict
    agent: Agent
    agent_config: Any
    fns: AgentFns
    policies: dict
    team_policy: dict
    _acts: dict = dataclasses.field(default_factory=dict, repr=False)

    def jitted_act(self, deterministic: bool) -> Callable:
        """``act`` jitted once per mode and shared by every policy (params are an
        argument) and every :func:`evaluate` call on this run."""
        if deterministic not in self._acts:
            act = (functools.partial(self.fns.act, deterministic=True) if deterministic
                   else self.fns.act)
            self._acts[deterministic] = jax.jit(act)
        return self._acts[deterministic]

    def policy_for(self, team: str | None) -> str:
        if team in self.team_policy:
            return self.team_policy[team]
        if None in self.team_policy:
            return self.team_policy[None]
        raise KeyError(f"no policy for team {team!r}; the run maps {self.team_policy}")


def read_config(path: str) -> dict:
    """A run's ``config.json`` (``path`` is the file or the run folder).

    Raises:
      FileNotFoundError: there is none.
    """
    if os.path.isdir(path):
        return RunDir(path).read_config()
    if not os.path.exists(path):
        raise FileNotFoundError(f"no run config at {path} (written by the launcher at start)")
    with open(path) as f:
        return json.load(f)


def team_policies(config: dict) -> dict:
    """``team -> policy`` for the first actor group of the run's dataflow (``None``:
    every agent; a ``--population`` run: ``member0``, pick another member with
    ``checkpoint=LOGDIR/checkpoints/member<i>``)."""
    if int(config.get("population") or 0) >= 2:
        flow = population_dataflow(int(config["population"]), int(config.get("num_actors", 1)))
    else:
        flow = (Dataflow.from_dict(config["dataflow"]) if config.get("dataflow")
                else default_dataflow(int(config.get("num_actors", 1))))
    learner = {t.sample_stream: t.policy for t in flow.trainers}
    return {team: learner[sample] for team, _, sample in flow.actors[0].bindings()}


def split_checkpoint_path(path: str) -> tuple[str, int | None]:
    """``(policy_dir, step or None)`` of ``LOGDIR/checkpoints/<policy>[/<step>]``."""
    run, policy, step = RunDir.of_checkpoint(path)
    return run.checkpoint_dir(policy), step


def restore_params(policy_dir: str, fns: AgentFns, step: int | None = None) -> PolicyCheckpoint:
    """Restore one policy's parameters (newest checkpoint unless ``step``).

    Raises:
      FileNotFoundError: no such folder, no checkpoint in it, or no checkpoint ``step``
        (the message names the run folder and the steps it keeps).
    """
    if not os.path.isdir(policy_dir):
        parent = os.path.dirname(policy_dir)
        have = sorted(d for d in os.listdir(parent)
                      if os.path.isdir(os.path.join(parent, d))) if os.path.isdir(parent) else []
        raise FileNotFoundError(f"no checkpoint folder {policy_dir}"
                                + (f" (this run's policies: {', '.join(have)})" if have else ""))
    if step is not None and step not in (kept := finalised_steps(policy_dir)):
        policy, run = os.path.basename(policy_dir), os.path.dirname(os.path.dirname(policy_dir))
        raise FileNotFoundError(
            f"policy {policy} has no checkpoint {step} in run folder {run}: it keeps "
            + (", ".join(map(str, kept)) if kept else "none")
            + " (the newest --keep_checkpoints; older ones are deleted)")
    like = {"agent": fns.init(jax.random.PRNGKey(0)), "rng": jax.random.PRNGKey(0)}
    ckpt = Checkpointer(policy_dir)
    try:
        step = ckpt.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {policy_dir}")
        tree, meta = ckpt.restore(like, step)
    finally:
        ckpt.close()
    return PolicyCheckpoint(os.path.basename(policy_dir), os.path.join(policy_dir, str(step)),
                            int(step), dict(meta or {}), tree["agent"].params)


def load_run(logdir: str | None = None, checkpoint: str | None = None,
             config_path: str | None = None, policy: str | None = None,
             agents: dict | None = None) -> LoadedRun:
    """Rebuild a trained run from its folder or from one checkpoint.

    Args:
      logdir: the run folder (``config.json``, ``checkpoints/``); newest checkpoints.
      checkpoint: ``LOGDIR/checkpoints/<policy>`` (newest step) or
        ``LOGDIR/checkpoints/<policy>/<step>``; the config is found two or three levels
        up unless ``config_path`` is given. Other policies of a run with a policy per
        team come from their newest checkpoints beside it; a policy that the run's
        first actor group does not use acts for every agent.
      config_path: ``config.json`` to use instead of the run's.
      policy: use this policy for every agent (default: the run's team mapping).
      agents: agent registry (default ``agents.AGENTS``).

    Raises:
      FileNotFoundError: missing run folder, config or checkpoint (a checkpoint step
        that is not kept: the message names the steps that are).
      ValueError: neither ``logdir`` nor ``checkpoint``, or an unknown agent/policy.
    """
    chosen: tuple[str, int | None] | None = None
    if checkpoint is not None:
        run_dir, policy_name, step = RunDir.of_checkpoint(checkpoint)
        chosen = (policy_name, step)
        checkpoints = run_dir  # the policies beside the chosen one
        if logdir is None:
            logdir = run_dir.path
    elif logdir is not None:
        checkpoints = RunDir(logdir)
    else:
        raise ValueError("give a run folder (logdir) or a checkpoint path")
    if not os.path.isdir(logdir):
        raise FileNotFoundError(f"no run folder {logdir}")
    config = read_config(config_path or logdir)
    name = config.get("agent")
    try:
        agent = get_agent(str(name), agents)
    except ValueError as exc:
        raise ValueError(f"config.json names agent {name!r}: {exc}") from None
    factory = agent_factory(str(name), config.get(agent.name), config["env"],
                            config.get("env_kwargs"), agents)
    fns = factory.make(1)  # num_updates only shapes LR schedules

    if policy is not None:
        mapping = {None: policy}
    else:
        mapping = team_policies(config)
        if chosen is not None and chosen[0] not in mapping.values():
            mapping = {None: chosen[0]}  # e.g. the second policy of a two-policy graph
    policies = {}
    for pname in sorted(set(mapping.values())):
        step = chosen[1] if chosen is not None and chosen[0] == pname else None
        policies[pname] = restore_params(checkpoints.checkpoint_dir(pname), fns, step)
    return LoadedRun(config, agent, factory.config, fns, policies, mapping)
