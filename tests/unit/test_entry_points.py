"""Entry points: ``jaxsrl-train``, ``jaxsrl-evaluate``, ``jaxsrl-bench``, ``jaxsrl-plot``,
``jaxsrl-sweep``.

``pyproject.toml`` declares them (``[project.scripts]``), each backed by
``jaxsrl.cli.<name>:main``; ``scripts/<name>.py`` are thin wrappers around the same
``main`` that no longer edit ``sys.path``. Once installed (``pip install -e .``) the
package metadata lists them and the console scripts run.
"""

import ast
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMANDS = ("train", "evaluate", "bench", "plot", "sweep")
EXPECTED = {f"jaxsrl-{name}": f"jaxsrl.cli.{name}:main" for name in COMMANDS}


def _declared() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


def test_pyproject_declares_the_console_scripts_and_their_mains_exist():
    assert _declared() == EXPECTED
    for target in EXPECTED.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), target


@pytest.mark.parametrize("name", COMMANDS)
def test_each_script_is_a_thin_wrapper_of_its_cli_module(name):
    """scripts/<name>.py imports main from jaxsrl.cli.<name> and does not touch sys.path."""
    path = os.path.join(ROOT, "scripts", f"{name}.py")
    with open(path) as f:
        source = f.read()
    imports = [(n.module, [a.name for a in n.names]) for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.ImportFrom)]
    assert (f"jaxsrl.cli.{name}", ["main"]) in imports
    assert "sys.path" not in source


def test_no_script_edits_sys_path():
    scripts = os.path.join(ROOT, "scripts")
    for name in sorted(os.listdir(scripts)):
        if name.endswith(".py"):
            with open(os.path.join(scripts, name)) as f:
                assert "sys.path" not in f.read(), name


@pytest.mark.parametrize("name", COMMANDS)
def test_python_m_runs_each_cli_module(name):
    """``python -m jaxsrl.cli.<name>`` calls ``main`` (a module without the guard exits 0
    doing nothing: jaxsrl.cli.bench did)."""
    with open(os.path.join(ROOT, "jaxsrl", "cli", f"{name}.py")) as f:
        tree = ast.parse(f.read())
    guards = [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Compare)
              and getattr(n.test.left, "id", None) == "__name__"
              and getattr(n.test.comparators[0], "value", None) == "__main__"]
    assert guards and "main(" in ast.unparse(guards[0]), name


def test_python_m_jaxsrl_cli_train_help_runs():
    out = subprocess.run([sys.executable, "-m", "jaxsrl.cli.train", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout and "--env" in out.stdout


def _installed_here():
    """The installed ``jaxsrl`` distribution if it is this checkout's, else ``None``."""
    try:
        dist = importlib.metadata.distribution("jaxsrl")
    except importlib.metadata.PackageNotFoundError:
        return None
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    places = {url.removeprefix("file://"), str(dist.locate_file(""))}
    return dist if any(p and os.path.realpath(p) == os.path.realpath(ROOT) for p in places) else None


def test_installed_metadata_lists_the_entry_points_and_they_run():
    dist = _installed_here()
    if dist is None:
        pytest.skip("jaxsrl is not installed from this checkout (pip install -e .)")
    found = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    if not found:
        pytest.skip("installed before [project.scripts] existed: rerun pip install -e .")
    assert found == EXPECTED
    for name in EXPECTED:
        assert importlib.metadata.entry_points(group="console_scripts", name=name), name
    exe = os.path.join(os.path.dirname(sys.executable), "jaxsrl-train")
    if os.path.exists(exe):  # installed into this interpreter's environment
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "usage:" in out.stdout, out.stderr
