"""Command lines: the top layer, nothing in ``jaxsrl`` imports it.

Each module has ``main(argv=None) -> int`` (the exit code) and runs as
``python -m jaxsrl.cli.<name>``; ``pyproject.toml`` installs them as console scripts and
``scripts/<name>.py`` are thin wrappers that call them:

==================  ===========================  =======================
console script      module                       wrapper
==================  ===========================  =======================
``jaxsrl-train``    :mod:`jaxsrl.cli.train`      ``scripts/train.py``
``jaxsrl-evaluate`` :mod:`jaxsrl.cli.evaluate`   ``scripts/evaluate.py``
``jaxsrl-bench``    :mod:`jaxsrl.cli.bench`      ``scripts/bench.py``
``jaxsrl-plot``     :mod:`jaxsrl.cli.plot`       ``scripts/plot.py``
==================  ===========================  =======================

Code that starts one of these as a process (``jaxsrl.tools.multiseed``,
``jaxsrl.launch.periodic_eval``) runs ``python -m jaxsrl.cli.<name>``, never a script by path.
"""
