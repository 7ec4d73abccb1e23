"""The bench ladder's reporting wing: documentation tooling of ``jaxsrl-bench``, kept out of
the runtime package :mod:`jaxsrl.bench` (which measures; this folder reports).

:mod:`.report` (targets, bottleneck, the derived parts of a report),
:mod:`.render` (JSON, Markdown and console text), :mod:`.md_region` (the generated region
of ``docs/benchmarks.md``) and :mod:`.ceiling` (the compute-bound ceiling). Plain data in,
text out (no JAX, no processes).
"""
