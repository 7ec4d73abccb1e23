"""The ABAB table of docs/architecture.md ("Inline inference"): ``python docs/results/inline_inference/table.py``.

Files: ``<series>_<env>_<mode>_<pair>.json``, reports of ``scripts/bench.py --rungs=end_to_end``
(series s1, s2, s3 run one after another; within a series each env's pairs ran server,
inline, server, inline, ...)."""
import json, glob, os, statistics as st
rows = {}
for f in glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), '*.json')):
    name = os.path.basename(f)[:-5]
    series, rest = name.split('_', 1)
    env, mode, rep = rest.rsplit('_', 2)
    e = json.load(open(f))['rungs'].get('end_to_end', {})
    load = e.get('load') or {}
    rows[(env, f"{series}.{rep}", mode)] = dict(fps=e['env_steps_per_s'], upd=e['updates_per_s'],
        stale=e['staleness_mean'], own=load.get('own_cores'), other=load.get('other_cores'), load1=load.get('load_average_1m'))
for env in ("CartPole-v1", "hide_and_seek"):
    print(f"\n**{env}** (env steps/s; own = CPU cores used by the run's processes, other = by everything else)\n")
    print("| pair | server | inline | inline / server | per own core-s: server, inline | updates/s: server, inline | staleness: server, inline | own cores: server, inline | other work, cores | 1-min load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    R, P = [], []
    for pair in sorted({k[1] for k in rows if k[0] == env}):
        s, i = rows.get((env, pair, 'server')), rows.get((env, pair, 'inline'))
        if not (s and i): continue
        r = i['fps'] / s['fps']; p = (i['fps'] / i['own']) / (s['fps'] / s['own'])
        R.append(r); P.append(p)
        print(f"| {pair} | {s['fps']:,.0f} | {i['fps']:,.0f} | {r:.2f} | {s['fps']/s['own']:,.0f}, {i['fps']/i['own']:,.0f} | {s['upd']:.1f}, {i['upd']:.1f} | {s['stale']:.2f}, {i['stale']:.2f} | {s['own']:.2f}, {i['own']:.2f} | {s['other']:.2f}, {i['other']:.2f} | {s['load1']:.0f}, {i['load1']:.0f} |")
    print(f"| median of {len(R)} pairs | | | **{st.median(R):.2f}** ({min(R):.2f}-{max(R):.2f}) | **{st.median(P):.2f}** ({min(P):.2f}-{max(P):.2f}) per core-s | | | | | |")
