"""``--resume``: what may change between a run and its continuation, and keeping its record.

The launcher (:func:`jaxsrl.launch.launcher.train`) calls, in this order:

1. :func:`check`, before anything in the run folder is written: a config whose agent
   builds a learner state of another structure than the newest checkpoint holds (its
   arrays' shapes and dtypes, from Orbax's metadata, against ``jax.eval_shape`` of the
   agent's ``init``) is refused in one line naming each setting that changed it, with
   its old and new value (:class:`ResumeRefused`, a ``ValueError``). Nothing is renamed,
   ``config.json`` stays as it was, and a plain ``--resume`` still works.
2. :func:`apply_hyperparameters`, on each restored learner state: the values of the
   agent's ``HYPERPARAMETERS`` that ``learn`` reads from ``state.hyper`` are set from the
   resumed config (its ``config.json`` with the flags given now) where they differ from
   the checkpoint's, so ``--resume --ppo.learning_rate=1e-5`` trains at 1e-5 (event
   ``hyperparameters_changed``). Population members keep their own (PBT set them).
3. :func:`commit_config`, once every restore has succeeded: ``config.json`` is replaced;
   the previous one is kept as ``config.<n>.json`` and the event ``config_changed``
   names every changed setting (old and new value).

``inference = "auto"`` is recorded as ``auto`` (with ``inference_resolved``, the mode it
ran) and resolved again on resume (:func:`inference_reason` says so in the ``run_start``
line); a ``config.json`` without the field predates it: that run had inference servers,
and resumes with them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from typing import Any, Mapping

import jax
import numpy as np

from jaxsrl.experiment import checkpoint as ckpt_lib
from jaxsrl.experiment import config as config_lib
from jaxsrl.experiment import events
from jaxsrl.experiment import modes
from jaxsrl.experiment.agent_build import agent_config_from_dict
from jaxsrl.experiment.run_dir import RunDir

log = logging.getLogger("jaxsrl.experiment.resume")

#: Keys of config.json that differ between a run and its resume without being a change
#: of its settings.
_NOT_SETTINGS = ("resume", "overwrite", "logdir", "inference_resolved")


class ResumeRefused(ValueError):
    """A ``--resume`` that would not continue the run: the message says why, in one line."""


def config_record(cfg: Any, requested_inference: str, logdir: str) -> dict:
    """What ``config.json`` holds for the run ``cfg`` (its inference mode resolved) whose
    ``--inference`` was ``requested_inference``: the config as plain data, with
    ``inference`` as requested (``auto`` stays ``auto``, resolved again on resume) and
    ``inference_resolved`` the mode run."""
    return config_lib.to_dict(cfg) | {"logdir": logdir, "inference": requested_inference,
                                      "inference_resolved": cfg.inference}


def changed_settings(old: Mapping, new: Mapping) -> dict[str, tuple[Any, Any]]:
    """``{"ppo.hidden_sizes": ([64, 64], [32, 32])}``: the settings (dotted paths into
    nested tables) whose values differ between two ``config.json`` contents. A key only
    one side has is a change if its table exists on both sides (``env_kwargs.x`` given
    now); a top-level key one side lacks (older or newer code) is not."""
    out: dict[str, tuple[Any, Any]] = {}

    def walk(a: Any, b: Any, prefix: str, top: bool) -> None:
        for key in sorted(set(a) | set(b)):
            if top and key in _NOT_SETTINGS:
                continue
            if top and (key not in a or key not in b):
                continue
            x, y = a.get(key), b.get(key)
            name = f"{prefix}{key}"
            if isinstance(x, Mapping) and isinstance(y, Mapping):
                walk(x, y, name + ".", False)
            elif _plain(x) != _plain(y):
                out[name] = (x, y)

    walk(old, new, "", True)
    return out


def _plain(value: Any) -> Any:
    """JSON's view of a value (tuples are lists)."""
    return json.loads(json.dumps(value, default=str))


def _shown(value: Any) -> str:
    return json.dumps(_plain(value))


def check(cfg: Any, setup: Any, logdir: str) -> None:
    """Refuse a ``--resume`` whose learner state no longer fits the run's checkpoints.

    For each trainer, the structure of the state its agent's ``init`` builds
    (``jax.eval_shape``: nothing is computed) is compared with that stored in the newest
    checkpoint of its policy whose metadata can be read (a damaged one is left to the
    restore, which falls back to an older one). Reads only.

    Args:
      cfg: the resumed config; setup: its :class:`~jaxsrl.launch.wiring.AgentSetup`
        (``fns_of``, ``flow``, ``spec``, ``updates``); logdir: the run folder.

    Raises:
      ResumeRefused: ``cannot resume LOGDIR: changes the learner state's structure:
        ppo.hidden_sizes [64, 64] -> [32, 32] (...)``, or some trainers' policies have
        checkpoints and others none (``--population`` or the ``[dataflow]`` changed).
    """
    run = RunDir(logdir)
    saved = {t.policy: bool(ckpt_lib.finalised_steps(run.checkpoint_dir(t.policy)))
             for t in setup.flow.trainers}
    if any(saved.values()) and not all(saved.values()):
        missing = sorted(p for p, ok in saved.items() if not ok)
        raise ResumeRefused(
            f"cannot resume {logdir}: no checkpoint of {', '.join(missing)} (the run saved "
            f"{', '.join(sorted(p for p, ok in saved.items() if ok))}: --population or the "
            "[dataflow] trainers changed); resume with the run's own values, or start a new "
            "run in another --logdir")
    for trainer in setup.flow.trainers:
        directory = run.checkpoint_dir(trainer.policy)
        stored, step = _newest_stored(directory)
        if stored is None:
            continue
        wanted = _wanted(setup.fns_of[trainer.name].init)
        differences = ckpt_lib.structure_differences(stored, wanted)
        if not differences:
            continue
        names = _structural_settings(cfg, setup, trainer, stored, run)
        path, old, new = differences[0]
        more = f" and {len(differences) - 1} more" if len(differences) > 1 else ""
        raise ResumeRefused(
            f"cannot resume {logdir}: changes the learner state's structure: "
            + (", ".join(f"{k} {_shown(a)} -> {_shown(b)}" for k, (a, b) in names.items())
               or "no setting changed (this code builds another state than the run saved)")
            + f" (checkpoint {step} of {trainer.policy}: {path} {old or 'absent'} -> "
            f"{new or 'absent'}{more}); resume with the run's own values, or start a new run "
            "in another --logdir")


def _newest_stored(directory: str) -> tuple[dict | None, int | None]:
    for step in ckpt_lib.finalised_steps(directory):
        try:
            return ckpt_lib.stored_structure(directory, step), step
        except Exception:  # noqa: BLE001  (damaged: the restore falls back past it)
            continue
    return None, None


def _wanted(init: Any) -> dict[str, str]:
    """The structure of ``{"agent": init(key), "rng": key}``, as the trainer saves it."""
    return ckpt_lib.structure(jax.eval_shape(
        lambda key: {"agent": init(key), "rng": key}, jax.random.PRNGKey(0)))


def _structural_settings(cfg: Any, setup: Any, trainer: Any, stored: dict,
                         run: RunDir) -> dict[str, tuple[Any, Any]]:
    """The changed settings that alter the state's structure: each changed field of the
    agent's table that alone (on the run's saved agent config) gives a state unlike the
    stored one, plus the environment's settings if the saved agent config on the new
    spaces does; every change if neither explains it."""
    saved = modes.current_record(run.config_or_empty(), run.config_path)
    changes = changed_settings(saved, config_lib.to_dict(cfg))
    field = cfg.agent_field or cfg.agent
    agent_cfg = cfg.agent_config()
    try:
        old_cfg = agent_config_from_dict(type(agent_cfg), saved.get(field))
    except Exception:  # noqa: BLE001  (an agent table this code cannot build)
        return changes
    agent = _agent_of(cfg)

    def differs(config: Any) -> bool:
        try:
            fns = agent.make(config, setup.spec, setup.updates[trainer.name])
            return bool(ckpt_lib.structure_differences(stored, _wanted(fns.init)))
        except Exception:  # noqa: BLE001  (a combination the agent refuses: not explained)
            return False

    named = {}
    for key, change in changes.items():
        top, _, name = key.partition(".")
        if top == field and name and hasattr(old_cfg, name.split(".")[0]):
            attr = name.split(".")[0]
            if differs(dataclasses.replace(old_cfg, **{attr: getattr(agent_cfg, attr)})):
                named[key] = change
    if differs(old_cfg):  # the saved hyperparameters on the new spaces: the env changed
        named.update({k: v for k, v in changes.items() if k.split(".")[0] in ("env", "env_kwargs")})
    return named or changes


def _agent_of(cfg: Any) -> Any:
    from agents import get_agent  # noqa: PLC0415  (the registry imports every agent)
    return get_agent(cfg.agent)


def apply_hyperparameters(restored: Any, fresh: Any, policy: str, cfg: Any) -> Any:
    """``restored`` (a learner state from a checkpoint) with the ``hyper`` values of
    ``fresh`` (the same state built from the resumed config) where they differ, and an
    event ``hyperparameters_changed`` naming them (old and new). States without a
    ``hyper`` dict are returned as they are; so are a population's members (PBT chose
    their values: they keep them).

    Args:
      restored, fresh: learner states (``LearnerState``: ``hyper`` is ``{name: [] float32}``).
      policy: its policy (for the event); cfg: the resumed config.
    """
    old, new = getattr(restored, "hyper", None), getattr(fresh, "hyper", None)
    if not isinstance(old, dict) or not isinstance(new, dict):
        return restored
    changed = {k: (float(old[k]), float(new[k])) for k in sorted(new)
               if k in old and float(old[k]) != float(new[k])}
    if not changed:
        return restored
    if cfg.population:
        log.info("resuming population member %s with its own hyperparameters (PBT chose them): %s",
                 policy, ", ".join(f"{k}={a:.4g}" for k, (a, _) in changed.items()))
        return restored
    events.emit(log, logging.INFO, "hyperparameters_changed",
                {"policy": policy, "changed": {k: list(v) for k, v in changed.items()}},
                "resuming %s with new hyperparameters: %s", policy,
                ", ".join(f"{k} {a:.6g} -> {b:.6g}" for k, (a, b) in changed.items()))
    return restored._replace(hyper={**old, **{k: _placed_like(old[k], new[k]) for k in changed}})


def _placed_like(old: Any, new: Any) -> Any:
    """``new`` as ``old`` is held: a NumPy array where the restore gave one (a
    multi-process learner restores to the host), else the fresh state's device array."""
    return np.asarray(jax.device_get(new), old.dtype) if isinstance(old, np.ndarray) else new


def commit_config(logdir: str, record: dict) -> None:
    """Replace the run's ``config.json`` by ``record`` (call once the restore succeeded).

    Where a setting changed, the previous file is kept as ``config.<n>.json`` (the
    first free ``n``) and the event ``config_changed`` names each setting (old, new)
    and the kept file. The new file is written beside and renamed over the old one, so
    a kill leaves one of the two whole.
    """
    run = RunDir(logdir)
    old = run.config_or_empty()
    if _plain(old) == _plain(record):
        return
    changes = changed_settings(modes.current_record(old, run.config_path), record)
    kept = None
    if changes and os.path.exists(run.config_path):
        n = 1
        while os.path.exists(os.path.join(logdir, f"config.{n}.json")):
            n += 1
        kept = os.path.join(logdir, f"config.{n}.json")
        shutil.copyfile(run.config_path, kept)
    run.write_config(record)  # marked as jaxsrl's, renamed over the old file
    if changes:
        events.emit(log, logging.INFO, "config_changed",
                    {"changed": {k: [a, b] for k, (a, b) in changes.items()}, "previous": kept},
                    "resumed with changed settings: %s (the previous config.json is %s)",
                    ", ".join(f"{k} {_shown(a)} -> {_shown(b)}" for k, (a, b) in changes.items()),
                    kept)


def budget_reached(logdir: str, total_env_steps: int) -> str | None:
    """A one-line note when every policy's newest checkpoint in ``logdir`` already counts
    ``total_env_steps`` env steps (its ``meta/metadata`` ``env_steps``): the resumed run
    has nothing to train; ``None`` otherwise, or when a count cannot be read."""
    root = RunDir(logdir).checkpoints_path
    counts = []
    for policy in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        steps = [int(n) for n in os.listdir(os.path.join(root, policy)) if n.isdigit()]
        if not steps:
            continue
        path = os.path.join(root, policy, str(max(steps)), "meta", "metadata")
        try:
            with open(path, encoding="utf-8") as f:
                counts.append(int(json.load(f)["env_steps"]))
        except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
            return None
    if not counts or min(counts) < total_env_steps:
        return None
    return (f"the run already counts {min(counts):,} env steps, at least "
            f"--total_env_steps={total_env_steps:,}: nothing to train; give a larger "
            "--total_env_steps to continue it")


def inference_reason(saved: Mapping, why: str) -> str:
    """The ``run_start`` line's inference reason ``why`` on resume, saying where the mode
    came from: ``auto`` resolved again (and what it ran before), or a ``config.json``
    older than the setting (that run had inference servers)."""
    if "inference" not in saved and "inline_inference" not in saved and why in ("thread", "process"):
        return f"{why} (the run's config.json predates the inference setting: it ran inference servers)"
    if saved.get("inference") == "auto" and saved.get("inference_resolved"):
        return f"{why}; resolved again on resume (it ran {saved['inference_resolved']} before)"
    return why
