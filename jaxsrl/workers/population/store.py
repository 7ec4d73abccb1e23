"""The population manager's files in the run folder (``LOGDIR/population/``, paths from
:class:`~jaxsrl.experiment.run_dir.RunDir`):

* ``events.jsonl``: one JSON object per exploit-and-explore event, appended when it is
  applied: ``round``, ``env_steps`` (the run's, when the round started), ``member``,
  ``source``, ``before``/``after`` (hyperparameters), ``how`` (``"*0.8"``, ``"*1.2"``
  or ``"resample"`` per search-space name), ``member_fitness``/``source_fitness``,
  ``source_version`` (the copied policy version) and ``version`` (the member's new one);
* ``lineage.json``: :meth:`jaxsrl.population.lineage.Lineage.state_dict`, rewritten
  after every round;
* ``state.json``: what ``--resume`` needs besides the learners' checkpoints: the round
  counter, the random generator's state, the last fitness and hyperparameters.

JSON files are written to a temporary name and renamed, so a crash never leaves half
a file.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from jaxsrl.experiment.run_dir import RunDir

FORMAT = 1  # version of state.json's layout
EVENTS, LINEAGE, STATE = "events.jsonl", "lineage.json", "state.json"


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class PopulationStore:
    """Reads and writes ``LOGDIR/population/``.

    Args:
      logdir: the run folder.
    """

    def __init__(self, logdir: str):
        self.run = RunDir(logdir)

    def _write_json(self, name: str, data: dict) -> None:
        path = self.run.population_file(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_clean(data), f, indent=1)
        os.replace(tmp, path)

    def append_event(self, record: dict) -> None:
        """Append one event record to ``events.jsonl``."""
        path = self.run.population_file(EVENTS)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps(_clean(record)) + "\n")

    def events(self) -> list[dict]:
        """The records of ``events.jsonl`` (``[]`` if none)."""
        path = self.run.population_file(EVENTS)
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def save(self, lineage: dict, state: dict) -> None:
        """Rewrite ``lineage.json`` and ``state.json`` (``state`` gets ``format``)."""
        self._write_json(LINEAGE, lineage)
        self._write_json(STATE, {"format": FORMAT, **state})

    def load(self) -> tuple[dict, dict] | None:
        """``(lineage, state)`` as saved, or ``None`` if the run saved none.

        Raises:
          ValueError: an unreadable file or an unknown ``state.json`` format, naming it.
        """
        paths = [self.run.population_file(n) for n in (LINEAGE, STATE)]
        if not all(os.path.exists(p) for p in paths):
            return None
        out = []
        for path in paths:
            try:
                with open(path) as f:
                    out.append(json.load(f))
            except (OSError, ValueError) as exc:
                raise ValueError(f"--resume: cannot read {path}: {exc}") from None
        if out[1].get("format") != FORMAT:
            raise ValueError(f"--resume: {paths[1]} has format={out[1].get('format')!r}; this "
                             f"version reads {FORMAT}")
        return out[0], out[1]
