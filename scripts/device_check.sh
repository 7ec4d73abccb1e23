#!/usr/bin/env bash
# The prepared accelerator check (issue 19): on a machine with a GPU, in under 5 minutes,
# learner-only and act-only rates of the CartPole, Atari and both hide-and-seek networks
# across batch sizes, and a 30 s end-to-end hide-and-seek run with actors on this machine's
# CPU cores; writes docs/benchmarks_gpu.md (+ .json). Extra flags go to the module, e.g.
#   scripts/device_check.sh --quick --out ''     # CPU smoke test, a few seconds
# See jaxsrl/bench/device_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout "${DEVICE_CHECK_TIMEOUT_S:-290}" python -m jaxsrl.bench.device_check "$@"
