#!/usr/bin/env bash
# Launch-to-475 on gymnax CartPole-v1: jaxsrl (device actors, default flags, cold XLA cache)
# against rejax 0.1.3's PPO (scripts/rejax_cartpole_475.py), alternating A B A B ...
# Each figure is the wall clock and the CPU time (user+system) of the whole command, from
# launch until it exits having reached a mean return >= 475. The load average is written
# before and after each run.
#
#   scripts/time_to_475.sh [OUT_DIR] [PAIRS]        (defaults: /tmp/time_to_475, 3)
#   JAXSRL_PY=/work/venv/bin/python REJAX_PY=/tmp/rejaxvenv/bin/python scripts/time_to_475.sh
#
# rejax's venv: see scripts/rejax_cartpole_475.py. Results: docs/device_actors.md
# ("Figures: launch to 475 against rejax").
set -u
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/time_to_475}
PAIRS=${2:-3}
JAXSRL_PY=${JAXSRL_PY:-/work/venv/bin/python}
REJAX_PY=${REJAX_PY:-/tmp/rejaxvenv/bin/python}
mkdir -p "$OUT"
unset JAX_COMPILATION_CACHE_DIR        # rejax: no persistent XLA cache (JAX's default: off)
summary="$OUT/summary.txt"
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) nproc=$(nproc)" >> "$summary"

run() {  # name, command...
  local name=$1; shift
  local before after t0 t1 rc
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  t0=$(date +%s.%N)
  /usr/bin/time -f "cpu_s=%U+%S" -o "$OUT/$name.time" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  after=$(cut -d' ' -f1-3 /proc/loadavg)
  local line
  line=$(printf '%s rc=%d wall_s=%.2f %s load_before=[%s] load_after=[%s]' \
    "$name" "$rc" "$(echo "$t1 - $t0" | bc)" "$(tail -1 "$OUT/$name.time")" "$before" "$after")
  echo "$line" | tee -a "$summary"
}

for i in $(seq 1 "$PAIRS"); do
  rm -rf "$OUT/jaxsrl_$i"
  run "jaxsrl_$i" "$JAXSRL_PY" scripts/train.py --env=gymnax:CartPole-v1 --target_return=475 \
    --compilation_cache_dir= --logdir="$OUT/jaxsrl_$i"
  run "rejax_$i" "$REJAX_PY" scripts/rejax_cartpole_475.py
done
