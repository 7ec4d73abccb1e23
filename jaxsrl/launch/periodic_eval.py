"""Periodic evaluation during training (``--eval_every``), in a separate process.

Both placements (CPU and device actors) evaluate this way. Every ``eval_every`` policy
versions the launcher asks the learners for a checkpoint and, once it is on disk, starts ``python -m jaxsrl.cli.evaluate --logdir LOGDIR --json ...`` as
a child process (one at a time), so evaluation never stalls the actors or the
learner. When it finishes, its summary is logged into ``metrics.jsonl`` under
``eval/`` keys (``eval/return_mean``, ``eval/return_mean/<team>``, ``eval/policy_version``,
...), separately from the training returns. A run that ends normally waits for the running
evaluation and evaluates its final checkpoint if an evaluation is due there
(:meth:`PeriodicEvaluator.finish`); Ctrl-C or a failure kills the running one.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from jaxsrl.experiment.run_dir import RunDir
from jaxsrl.core.paths import child_env
from jaxsrl.parallel.compile_cache import MIN_COMPILE_TIME_S

log = logging.getLogger("jaxsrl.eval")


class PeriodicEvaluator:
    """Starts and collects evaluation processes for one run.

    Args:
      logdir: the run folder (``config.json`` and ``checkpoints/``).
      every: policy versions between evaluations (0: never).
      episodes: episodes per evaluation.
      cache_dir: the run's persistent XLA cache (``--compilation_cache_dir``), which the
        evaluation processes use too (``None``: none), so each one after the first
        loads its compiled programs instead of compiling them again.
    """

    def __init__(self, logdir: str, every: int, episodes: int, cache_dir: str | None = None):
        self.logdir, self.every, self.episodes = logdir, every, episodes
        self.cache_dir = os.path.expanduser(cache_dir) if cache_dir else None
        self.next_version = every
        self.proc: subprocess.Popen | None = None
        self.pending_version: int | None = None  # waiting for this checkpoint
        self._run_dir = RunDir(logdir)

    def due(self, version: int) -> bool:
        """True when a checkpoint for an evaluation should be requested now."""
        return (self.every > 0 and self.proc is None and self.pending_version is None
                and version >= self.next_version)

    def requested(self, version: int) -> None:
        self.pending_version = version

    def poll(self, saved_version: int | None) -> dict | None:
        """Start the evaluation once the checkpoint exists; return a finished one's metrics."""
        if self.pending_version is not None and saved_version is not None \
                and saved_version >= self.pending_version:
            path = self._run_dir.eval_file(saved_version)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            cmd = [sys.executable, "-m", "jaxsrl.cli.evaluate",
                   "--logdir", self.logdir, "--episodes", str(self.episodes), "--json", path]
            # The run's process holds most of an accelerator's memory (JAX preallocates
            # 75%): the evaluation allocates what it uses, unless the user said otherwise.
            extra = {"JAXSRL_TENSORBOARD": "0", "JAXSRL_PROGRESS": "0",
                     "XLA_PYTHON_CLIENT_PREALLOCATE":
                         os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false")}
            if self.cache_dir:  # JAX reads these at its start
                extra.update(JAX_COMPILATION_CACHE_DIR=self.cache_dir,
                             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=str(MIN_COMPILE_TIME_S))
            env = child_env(extra)
            self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
            self._path, self._version = path, saved_version
            self.pending_version = None
            self.next_version = saved_version + self.every
            return None
        if self.proc is None or self.proc.poll() is None:
            return None
        code, err = self.proc.returncode, self.proc.stderr.read() if self.proc.stderr else ""
        self.proc = None
        if code != 0 or not os.path.exists(self._path):
            log.warning("evaluation of version %d failed (exit %s): %s", self._version, code,
                        err.strip().splitlines()[-1:] or "")
            return {"eval/failures": 1.0}
        with open(self._path) as f:
            return eval_metrics(json.load(f)["summary"], self._version)

    def finish(self, final_version: int | None, timeout_s: float = 300.0) -> list[dict]:
        """At a run's normal end (its final checkpoints saved): wait for the running
        evaluation, then evaluate ``final_version`` (the final checkpoint; ``None``:
        none) if an evaluation was asked for and not started, or is due at it; returns
        the metrics of each (``[]``: none). Each wait lasts at most ``timeout_s``
        seconds (then the evaluation is killed). Evaluations are bounded (an env
        without a time limit is cut, ``jaxsrl.tools.evaluation``), so the waits end."""
        results = [self._wait(timeout_s)]
        if final_version is not None and self.every and (
                self.pending_version is not None or final_version >= self.next_version):
            self.pending_version = None
            self.requested(final_version)
            self.poll(final_version)  # starts it
            results.append(self._wait(timeout_s))
        return [r for r in results if r]

    def _wait(self, timeout_s: float) -> dict | None:
        """The running evaluation's metrics once it ended (``None``: none ran, or it
        outlasted ``timeout_s`` and was killed)."""
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("evaluation of version %d still runs after %.0f s: stopped", self._version,
                        timeout_s)
            self.stop()
            self.proc = None
            return None
        return self.poll(None)

    def stop(self) -> None:
        """Kill the running evaluation, if any (Ctrl-C, SIGTERM, a failed run)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def eval_metrics(summary: dict, version: int) -> dict:
    """The ``eval/*`` means of an evaluation ``summary`` (:meth:`EvalResult.summary
    <jaxsrl.tools.evaluation.EvalResult.summary>`, its numbers) of policy ``version``,
    as ``metrics.jsonl`` records them (and logs the return)."""
    out = {f"eval/{k}": float(v) for k, v in summary.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out["eval/policy_version"] = float(version)
    log.info("evaluation of version %d: return %.2f", version, out.get("eval/return_mean", float("nan")))
    return out
