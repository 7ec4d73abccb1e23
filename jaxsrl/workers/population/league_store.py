"""The self-play league's files in the run folder (``LOGDIR/selfplay/``):

* ``snapshots/<n>/``: Orbax checkpoints of the pools' snapshot parameters (items
  ``s0``, ``s1``, ...), with the league's JSON state as the checkpoint's ``meta``
  (pools, ratings, totals, and which policy and version each item is); the newest
  readable one is restored on ``--resume``;
* ``league.json`` (the league table: ratings rows, highest ordinal first) and
  ``league.md`` (the same as a Markdown table), rewritten at each save.

JSON files are written to a temporary name and renamed, so a crash never leaves half
a file.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Mapping

import numpy as np
import orbax.checkpoint as ocp

from jaxsrl.experiment.checkpoint import Checkpointer
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.population.league_table import markdown

log = logging.getLogger("jaxsrl.selfplay")


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class LeagueStore:
    """Saves and restores a :class:`~jaxsrl.workers.population.league.League`.

    Args:
      logdir: the run folder.
      keep: newest snapshot checkpoints kept.
    """

    def __init__(self, logdir: str, keep: int = 2):
        self.path = RunDir(logdir).selfplay_path
        os.makedirs(self.path, exist_ok=True)
        self.checkpointer = Checkpointer(os.path.join(self.path, "snapshots"), keep,
                                         check=_check_league_meta)
        latest = self.checkpointer.latest_step()
        self._step = 0 if latest is None else latest + 1

    @property
    def table_path(self) -> str:
        return os.path.join(self.path, "league.json")

    def save(self, league: Any) -> int:
        """Save the league's state and snapshots (asynchronously) and rewrite the league
        table; returns the checkpoint's step."""
        state, snapshots = league.state()
        items, slots = {"count": np.zeros((), np.int32)}, []
        for p, by_version in snapshots.items():
            for v, params in sorted(by_version.items()):
                items[f"s{len(slots)}"] = params
                slots.append([p, int(v)])
        step = self._step
        self.checkpointer.save(step, items, {**state, "slots": slots})
        self._step += 1
        rows = league.table()
        _write(self.table_path, json.dumps(rows, indent=1))
        _write(os.path.join(self.path, "league.md"), markdown(rows))
        return step

    def load(self, template: Callable[[str], Any]) -> tuple[dict, dict] | None:
        """``(state, {policy: {version: params}})`` of the newest saved league, or ``None``
        when the run saved none. ``template(policy)`` gives a pytree laid out like that
        policy's parameters (dtypes, shapes and shardings of the restored arrays).

        Raises:
          RuntimeError: no saved league could be read.
        """
        step = self.checkpointer.latest_step()
        if step is None:
            return None
        meta = self.read_state(step)
        slots = meta.pop("slots")
        like = {"count": np.zeros((), np.int32),
                **{f"s{i}": template(p) for i, (p, _) in enumerate(slots)}}
        tree, _ = self.checkpointer.restore(like, step)
        out: dict[str, dict[int, Any]] = {}
        for i, (p, v) in enumerate(slots):
            out.setdefault(p, {})[int(v)] = tree[f"s{i}"]
        log.info("restored the self-play league of checkpoint %d (%d snapshots)", step, len(slots))
        return meta, out

    def read_state(self, step: int | None = None) -> dict | None:
        """The JSON state of saved league ``step`` (default: the newest; ``None`` if none),
        with ``slots``: ``[[policy, version], ...]`` of its parameter items."""
        step = self.checkpointer.latest_step() if step is None else step
        if step is None:
            return None
        return self.checkpointer.manager.restore(step, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore())).meta

    def read_table(self) -> list[Mapping]:
        """The league table as last saved (``[]`` if none)."""
        if not os.path.exists(self.table_path):
            return []
        with open(self.table_path) as f:
            return json.load(f)

    def close(self) -> None:
        self.checkpointer.close()


def _check_league_meta(meta: Any, step: int) -> dict:
    """A saved league's ``meta`` (its state and ``slots``, ``[[policy, version], ...]``).

    Raises:
      ValueError: not a map, or ``slots`` not a list of ``[str, int]`` pairs (one line).
    """
    slots = meta.get("slots") if isinstance(meta, dict) else None
    if not isinstance(slots, list) or not all(
            isinstance(s, list) and len(s) == 2 and isinstance(s[0], str)
            and type(s[1]) is int for s in slots):  # noqa: E721  (not bool)
        raise ValueError(f"league snapshot {step}: meta has no list of [policy, version] slots")
    return meta
