"""The run loop of a ``--population`` on device actors (``docs/device_actors.md``,
"Populations and PBT"): the members' learner states stacked along a member axis and
one compiled call (:func:`jaxsrl.workers.device.population.jit_population_step`)
rolling out and training every member on its own ``batch_segments`` environments.

Everything population-specific is the CPU population's
(:class:`jaxsrl.launch.population.Population`): member names ``member0 ..``, their
initial hyperparameters (``[pbt.initial]`` or drawn from the search space), each
member's metrics (:class:`~jaxsrl.launch.population.MemberMetrics`: learner metrics as
``<name>/<member>``, ``population/return/<member>``, the fitness tracker), and the
:class:`~jaxsrl.workers.population.manager.PopulationManager`, whose ``is_ready`` and
``step`` decide and apply every round (fitness, truncation selection, perturbation,
``population/events.jsonl``, lineage, state) exactly as in a CPU run. The manager
drives each member through :class:`MemberHandle`, a trainer as it sees one, served
between two compiled steps in this thread: an exploit writes the copied state into
the member's slice of the stack and bumps its policy version, as a trainer's
``request_replace`` does. Hyperparameters are learner-state leaves (``[M]`` float32
stacked), so nothing is recompiled.

Run folder as a CPU population's: ``checkpoints/<member>/<version>`` (``{"agent",
"rng"}`` of that member), ``population/``, ``metrics.jsonl`` with ``policy_version/<member>``;
``--resume`` restores every member and the manager's lineage, round and generator.
``--eval_every`` evaluates ``member0``, as a CPU population's evaluation does.
Env frames: ``total_env_steps`` counts all members' together, as on CPU actors; each
member's learning-rate schedule is planned over its share.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxsrl.experiment import events
from jaxsrl.experiment import resume as resumption
from jaxsrl.experiment.agent_build import factory_of_run
from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.metrics import MetricsAccumulator, MetricsWriter
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.launch.device_actors import _Loop
from jaxsrl.launch.population import Population
from jaxsrl.parallel import devices
from jaxsrl.workers.device.fused import make_fused_step
from jaxsrl.workers.device.population import (jit_population_step, make_population_step,
                                              member, member_env_sharding, set_member, stack)
from jaxsrl.workers.device.rollout import initial_rollout_carry, make_rollout
from jaxsrl.workers.learner.requests import check_same_layout

log = logging.getLogger("jaxsrl")


class MemberHandle:
    """Member ``index`` of a :class:`PopulationLoop` as the population manager sees a
    trainer (``version``, ``state``, ``run_between_updates``, ``request_replace``,
    ``stop``, ``checkpoint_requested``). Requests run at once, in the calling thread:
    the loop calls the manager between two compiled steps, when no step uses the state.
    """

    def __init__(self, loop: "PopulationLoop", index: int, name: str):
        self.loop, self.index, self.name = loop, index, name
        self.stop = threading.Event()
        self.checkpoint_requested = threading.Event()

    @property
    def version(self) -> int:
        """The member's policy version."""
        return int(self.loop.version[self.index])

    @property
    def state(self) -> Any:
        """The member's learner state (its slice of the stack)."""
        return member(self.loop.state, self.index)

    @state.setter
    def state(self, value: Any) -> None:
        self.loop.state = devices.put_replicated(
            set_member(self.loop.state, self.index, value), self.loop.mesh)

    def run_between_updates(self, fn: Callable) -> concurrent.futures.Future:
        """A finished future of ``fn(self)`` (or of what it raised)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(self))
        except Exception as exc:  # noqa: BLE001  (handed to the caller through the future)
            future.set_exception(exc)
        return future

    def request_replace(self, state: Any) -> concurrent.futures.Future:
        """Make ``state`` the member's learner state and its parameters a new policy
        version; a future of that version (a ``ValueError`` if ``state`` does not match
        the member's layout, which is then kept)."""
        def swap(handle):
            check_same_layout(handle.state, state, handle.name)
            handle.state = state
            handle.loop.version = handle.loop.version.at[handle.index].add(1)
            return handle.version
        return self.run_between_updates(swap)


class PopulationLoop(_Loop):
    """State of a device-actor population run; :meth:`run` is the single run's loop
    (:class:`jaxsrl.launch.device_actors._Loop`) over the stacked members, with a PBT
    round whenever the manager is ready. Same constructor as ``_Loop`` (``policy`` and
    ``fns`` are rebuilt per member: each plans its schedule over its share of frames)."""

    def __init__(self, cfg, logdir, policy, fns, env, mesh, clock, evaluator=None):  # noqa: ARG002
        self.cfg, self.logdir, self.clock, self.mesh = cfg, logdir, clock, mesh
        self.evaluator = evaluator
        self.num_envs, self.T = cfg.batch_segments, cfg.segment_length
        self.metrics = MetricsAccumulator()
        self.population = Population(cfg, logdir, self.metrics)
        self.members = self.population.members
        self.policy = self.members[0]
        n = len(self.members)
        fns = factory_of_run(cfg).make(cfg.num_updates(1 / n))  # closures only
        run = RunDir(logdir)
        self.ckpts = {m: Checkpointer(run.checkpoint_dir(m), cfg.keep_checkpoints)
                      for m in self.members}
        states, rngs, versions, carries = [], [], [], []
        for i, m in enumerate(self.members):
            state, rng, version = self._initial(i, m, fns)
            # Fresh episodes on every (re)start, each member on its own environments.
            env_key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed + 1 + 1000 * i), version)
            carries.append(initial_rollout_carry(env, env_key, self.num_envs, fns.initial_carry))
            states.append(state), rngs.append(rng), versions.append(version)
        self.state = devices.put_replicated(stack(states), mesh)
        self.rng = devices.put_replicated(stack(rngs), mesh)
        self.version = jnp.asarray(versions, jnp.int32)
        self.env_carry = jax.device_put(stack(carries), member_env_sharding(mesh))
        self.handles = {m: MemberHandle(self, i, m) for i, m in enumerate(self.members)}
        self.manager = self.population.manager(self.handles)  # sets fresh members' hyper
        rollout = make_rollout(env, fns.act, self.T, fns.initial_carry)
        step = jit_population_step(make_population_step(make_fused_step(rollout, fns.learn)), mesh)
        t0 = clock()
        step = step.lower(self.state, self.env_carry, self.rng, self.version).compile()
        self.step = lambda *args: (*step(*args), 1)  # _Loop.run's: one version per step
        log.info("device actors: the %d members' rollout-and-learn step compiled in %.1f s",
                 n, clock() - t0)
        self.member_metrics = [self.population.metrics_for(m) for m in self.members]
        for m, v in zip(self.members, versions):
            self.metrics.set_version(m, v)
        self.writer = MetricsWriter(logdir)
        self.last_log = self.last_ckpt = clock()
        self.record: dict = {}

    def _initial(self, i: int, name: str, fns: Any) -> tuple[Any, Any, int]:
        """``(state, rng, version)`` of member ``i``, seeded as the CPU path's ``i``-th
        trainer (``jaxsrl.launch.builders``), or restored on ``--resume`` (the run's env
        steps follow the newest member's checkpoint)."""
        rng, init_key = jax.random.split(jax.random.PRNGKey(self.cfg.seed + 1000 * i))
        state = devices.put_replicated(fns.init(init_key), self.mesh)
        if not self.cfg.resume:
            return state, rng, 0
        tree, meta = self.ckpts[name].restore({"agent": state, "rng": rng},
                                              set_aside_unreadable=True)
        state = resumption.apply_hyperparameters(tree["agent"], state, name, self.cfg)
        version = int(meta["policy_version"])
        self.metrics.env_steps = max(self.metrics.env_steps, int(meta.get("env_steps", 0)))
        events.emit(log, logging.INFO, "resumed", {"policy": name, "version": version,
                    "env_steps": self.metrics.env_steps}, "resumed %s from version %d, %d env "
                    "steps", name, version, self.metrics.env_steps)
        return state, tree["rng"], version

    def _count(self, metrics, stats, version, updates=1) -> None:  # noqa: ARG002
        """Add one finished step of every member to the interval (blocks until done;
        ``updates`` is 1: every member learns once per step)."""
        metrics, stats, version = jax.device_get((metrics, stats, version))
        for i, (m, mm) in enumerate(zip(self.members, self.member_metrics)):
            mm.add_env_steps(self.num_envs * self.T)
            mm.add_episodes(int(stats.count[i]), float(stats.return_sum[i]),
                            float(stats.length_sum[i]))
            mm.add_means({k: float(v[i]) for k, v in metrics.items()}
                         | {"staleness_mean": 0.0, "staleness_max": 0.0})  # fused: on-policy
            self.metrics.set_version(m, int(version[i]))

    def _checkpoint_due(self) -> None:
        """Between two steps: a PBT round when every member is ready (the members it
        changed are checkpointed), then the periodic checkpoint."""
        self.manager.record_hyper()
        if self.manager.is_ready():
            self.manager.step()
        for i, handle in enumerate(self.handles.values()):
            if handle.checkpoint_requested.is_set():
                handle.checkpoint_requested.clear()
                self._save_member(i)
        super()._checkpoint_due()

    def _evaluate_due(self) -> None:
        """``--eval_every``: as a CPU population's evaluation, the first member's
        (``member0``) newest version, checkpointed, every ``eval_every`` of its versions."""
        name, version = self.members[0], int(self.version[0])
        if self.evaluator is not None and self.evaluator.due(version):
            self._save_member(0)
            saved = {name: os.path.join(self.ckpts[name].directory, str(version))}
            self.metrics.add_means(self.evaluator.evaluate(member(self.state, 0).params,
                                                           version, saved))

    def _save(self) -> None:
        for i in range(len(self.members)):
            self._save_member(i)

    def _save_member(self, i: int) -> None:
        """Checkpoint member ``i``'s newest state (``_Loop._save_to``)."""
        name = self.members[i]
        self._save_to(self.ckpts[name], int(self.version[i]), member(self.state, i), self.rng[i])

    def _close_checkpoints(self) -> dict:
        """Close every member's checkpointer (``_Loop._close`` saved them first);
        ``{member: version}``."""
        for c in self.ckpts.values():
            c.close()
        return {m: int(v) for m, v in zip(self.members, self.version)}
