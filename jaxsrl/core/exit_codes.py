"""Exit codes of worker processes, shared by the workers (which exit with them) and the
launcher (which reads them to decide whether to restart a worker and what to report).

No JAX here: actors import this.
"""

EXIT_SERVER_TIMEOUT = 3
"""An actor heard nothing from its inference server for ``server_timeout`` seconds."""
EXIT_ENV_ERROR = 4
"""An actor's environment raised; the traceback is in the actor's error file."""
EXIT_LEARNER_TIMEOUT = 5
"""An actor heard nothing from its learner (no new policy version) for too long."""
EXIT_NONFINITE = 6
"""A buffer process got a segment holding NaN or Inf under ``on_nonfinite="raise"``: the
launcher stops the run naming it (no restart)."""
