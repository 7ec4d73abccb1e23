#!/bin/bash
# Session 8: hide-and-seek ladder of the new tree (ceiling), then end to end old/new ABAB (default mode: auto -> inline)
OUT=/work/wt/numba19/docs/results/bench_session8
NEW=/work/wt/numba19; OLD=/work/main
uptime
(cd $NEW && PYTHONPATH=$NEW python scripts/bench.py --env=hide_and_seek --rungs=raw_env,physics,inference,learner,end_to_end --e2e_s=30 --out_json=$OUT/hide_and_seek.json --out_md=$OUT/hide_and_seek.md > /tmp/m8_ladder.log 2>&1)
uptime
for i in 1 2; do
  (cd $OLD && PYTHONPATH=$OLD python scripts/bench.py --env=hide_and_seek --rungs=end_to_end --e2e_s=30 --out_json=$OUT/hs_e2e_old_$i.json --out_md='' > /tmp/m8_old_$i.log 2>&1)
  uptime
  (cd $NEW && PYTHONPATH=$NEW python scripts/bench.py --env=hide_and_seek --rungs=end_to_end --e2e_s=30 --out_json=$OUT/hs_e2e_new_$i.json --out_md='' > /tmp/m8_new_$i.log 2>&1)
  uptime
done
echo DONE
