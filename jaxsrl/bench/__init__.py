"""The benchmark ladder: where every frame goes, from raw environment speed to training.

``python scripts/bench.py [--quick] [train.py flags]`` measures, on this machine:

1. ``raw_env``    env steps/s of the actor layout with random actions (no inference);
1b. ``physics``   the env's own MuJoCo model stepped with random controls, no
   observations (env steps per core-second; n/a for envs without one);
2. ``transport``  ZeroMQ DEALER/ROUTER round trips/s at one ``act`` request's size;
3. ``inference``  real actor processes + a real policy worker with frozen parameters;
4. ``learner``    samples/s of the jitted ``learn`` on synthetic batches;
5. ``end_to_end`` training env steps/s through ``jaxsrl.launch.launcher.train``;
6. ``scaling``    end-to-end env steps/s against the number of actor processes;
9. ``server_only`` the real policy worker with a trivial policy and fake actors (one or
   more fake-actor processes): rows/s per server core and CPU per request (7 ``replay`` and 8 ``offpolicy``: their modules);
10. ``fan_in``    (opt-in) 1,000-4,000 simulated actors on one inference server and one
   learner sample socket: latency, server CPU per request, memory per actor, refused
   connections (:mod:`~jaxsrl.bench.fan_in`);

plus the peak resident memory of each process kind. One module per job:
:mod:`~jaxsrl.bench.raw_env`, :mod:`~jaxsrl.bench.physics`, :mod:`~jaxsrl.bench.transport`,
:mod:`~jaxsrl.bench.inference`, :mod:`~jaxsrl.bench.learner`,
:mod:`~jaxsrl.bench.end_to_end`, :mod:`~jaxsrl.bench.server_only`, :mod:`~jaxsrl.bench.fan_in`
(rungs);
:mod:`~jaxsrl.bench.memory` (RSS sampling), :mod:`~jaxsrl.bench.machine` (what ran it),
:mod:`~jaxsrl.bench.rungs` (runs the ladder),
:mod:`~jaxsrl.bench.procs` (child processes, through ``jaxsrl.launch.processes``).
The report (targets, bottleneck, compute-bound ceiling, JSON and Markdown) is the command
line's: :mod:`jaxsrl.cli.bench_report`, with :mod:`jaxsrl.cli.bench`. Importing this
package imports no JAX (the raw-environment and echo-server child processes use it).
"""
