"""Summary of the PBT vs fixed-learning-rate CartPole runs (docs/population.md):

    PYTHONPATH=. python docs/results/pbt_cartpole/summarize.py NAME=LOGDIR [NAME=LOGDIR ...]
"""
import json, sys
from jaxsrl.experiment.run_dir import RunDir

def first(records, pred):
    return next((r["env_steps"] for r in records if pred(r)), None)

out = {}
for name, logdir in (a.split("=", 1) for a in sys.argv[1:]):
    rs = RunDir(logdir).read_metrics(final=False)
    members = sorted({k.split("/")[2] for r in rs for k in r if k.startswith("population/return/")})
    ret = lambda r: r.get("episode_return_mean")
    best = lambda r: max([r[f"population/return/{m}"] for m in members if r.get(f"population/return/{m}") is not None] or [None], key=lambda v: -1 if v is None else v)
    s = {"env_steps": rs[-1]["env_steps"], "wall_time_s": round(rs[-1]["wall_time_s"], 1),
         "return_last": ret(rs[-1]), "return_max": max(ret(r) for r in rs if ret(r) is not None),
         "first_env_steps_return_475": first(rs, lambda r: (ret(r) or 0) >= 475)}
    if members:
        s["first_env_steps_best_member_475"] = first(rs, lambda r: (best(r) or 0) >= 475)
        s["exploits"] = max(r.get("pbt/exploits", 0) for r in rs)
        s["rounds"] = max(r.get("pbt/rounds", 0) for r in rs)
        s["final_member_returns"] = {m: next(r[f"population/return/{m}"] for r in reversed(rs) if f"population/return/{m}" in r) for m in members}
    out[name] = s
print(json.dumps(out, indent=1))
