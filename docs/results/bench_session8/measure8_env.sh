#!/bin/bash
# Session 8, issue 19 env step: old = /work/main (7a8a665), new = /work/wt/numba19; ABAB, rungs 1 and 1b, both variants
OUT=/work/wt/numba19/docs/results/bench_session8
for i in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then T=/work/main; else T=/work/wt/numba19; fi
    uptime
    (cd $T && PYTHONPATH=$T python scripts/bench.py --env=hide_and_seek --rungs=raw_env,physics --out_json=$OUT/hs_quadrant_${tree}_$i.json --out_md='' > /tmp/m8_q_${tree}_$i.log 2>&1)
    (cd $T && PYTHONPATH=$T python scripts/bench.py --env=hide_and_seek_full --num_actors=2 --envs_per_actor=2 --rungs=raw_env,physics --out_json=$OUT/hs_full_${tree}_$i.json --out_md='' > /tmp/m8_f_${tree}_$i.log 2>&1)
  done
done
uptime
echo DONE
