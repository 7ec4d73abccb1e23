"""Dependencies run one way: the import-linter contracts of ``pyproject.toml`` hold.

``[tool.importlinter]`` lists the planes of ``jaxsrl`` high to low (a plane imports
only planes below it), keeps the three workers independent, lets ``agents`` import
only ``jaxsrl.core`` of jaxsrl and keeps JAX out of the actor. These tests run the
linter on this checkout, check that every plane is in the contracts, and that the
linter does fail on planted upward imports (so a passing run means something).
"""

import os
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINT = "import sys; from importlinter.cli import lint_imports; " \
       "sys.exit(lint_imports(no_cache=True, no_logo=True))"


def _lint(root: str) -> subprocess.CompletedProcess:
    """``lint-imports`` on the checkout at ``root`` (its pyproject.toml), in a fresh process."""
    pytest.importorskip("importlinter")
    env = dict(os.environ, PYTHONPATH=root)  # this checkout's packages, not an installed one
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def _contracts() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _planes() -> set:
    """``jaxsrl.<name>`` for every subpackage of ``jaxsrl/``."""
    top = os.path.join(ROOT, "jaxsrl")
    return {f"jaxsrl.{name}" for name in os.listdir(top)
            if os.path.isfile(os.path.join(top, name, "__init__.py"))}


def test_the_import_contracts_hold():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_every_plane_is_in_the_layers_and_agents_see_only_core():
    contracts = _contracts()
    layers = [layer.strip("()") for layer in contracts["planes"]["layers"]]
    assert set(layers) == _planes(), "a new plane of jaxsrl/ needs its place in the layers"
    assert layers[-1] == "jaxsrl.core"
    assert set(contracts["agents"]["forbidden_modules"]) == _planes() - {"jaxsrl.core"}
    assert {"jax", "jaxlib", "flax", "optax"} <= set(contracts["actor-no-jax"]["forbidden_modules"])


def _copy_checkout(dst) -> str:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("jaxsrl", "agents"):
        shutil.copytree(os.path.join(ROOT, name), dst / name, ignore=skip)
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dst / "pyproject.toml")
    return str(dst)


def _plant(path, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"\n\ndef _planted():\n    {line}  # noqa: PLC0415\n")


def test_planted_upward_imports_break_the_contracts(tmp_path):
    root = _copy_checkout(tmp_path)
    # Function-local imports count: grimp reads every import statement.
    _plant(tmp_path / "jaxsrl" / "streams" / "wire.py", "from jaxsrl.launch import launcher")
    _plant(tmp_path / "jaxsrl" / "core" / "child.py", "import jax")  # the actor imports child
    _plant(tmp_path / "agents" / "ppo.py", "from jaxsrl.envs import make_env")
    _plant(tmp_path / "jaxsrl" / "workers" / "actor" / "worker.py",
           "from jaxsrl.workers.inference import policy")
    out = _lint(root)
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, out.stdout + out.stderr
    assert "4 broken" in text, out.stdout
    assert "jaxsrl.streams is not allowed to import jaxsrl.launch" in text
    assert "jaxsrl.streams.wire -> jaxsrl.launch.launcher" in text
    assert "jaxsrl.workers.actor is not allowed to import jax" in text
    assert "jaxsrl.core.child -> jax" in text
    assert "agents is not allowed to import jaxsrl.envs" in text
    assert "jaxsrl.workers.actor.worker -> jaxsrl.workers.inference.policy" in text


def test_the_evaluation_branch_importing_the_entry_point_back_breaks_a_contract(tmp_path):
    """Issue 41: ``jaxsrl.tools.evaluation`` -> ``device_evaluation`` is one way; the old
    circle (the branch importing ``EvalResult`` from the entry point) is refused."""
    assert _contracts()["evaluation-one-way"]["forbidden_modules"] == ["jaxsrl.tools.evaluation"]
    root = _copy_checkout(tmp_path)
    _plant(tmp_path / "jaxsrl" / "tools" / "device_evaluation.py",
           "from jaxsrl.tools.evaluation import EvalResult")
    out = _lint(root)
    text = " ".join(out.stdout.split())
    assert out.returncode == 1 and "1 broken" in text, out.stdout + out.stderr
    assert "jaxsrl.tools.device_evaluation -> jaxsrl.tools.evaluation" in text


def _import_circles(root: str, packages=("jaxsrl.launch", "jaxsrl.tools", "jaxsrl.workers")) -> list:
    """Pairs of modules of one of ``packages`` that import each other, directly or through
    other modules of that package (grimp's graph of the checkout at ``root``; imports under
    ``TYPE_CHECKING`` count), found in a fresh process."""
    pytest.importorskip("grimp")
    code = f"""
import grimp, json
g = grimp.build_graph("jaxsrl")
out = []
for pkg in {list(packages)!r}:
    mods = sorted(m for m in g.modules if m.startswith(pkg + "."))
    for a in mods:
        for b in sorted(g.find_modules_directly_imported_by(a)):
            if b in mods and b != a and g.chain_exists(importer=b, imported=a):
                out.append(sorted([a, b]))
print(json.dumps(sorted(map(list, {{tuple(p) for p in out}}))))
"""
    env = dict(os.environ, PYTHONPATH=root)
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import json  # noqa: PLC0415
    return json.loads(proc.stdout)


def test_no_import_circles_in_the_controller_tools_or_workers(tmp_path):
    """Issue 41: the launcher, the tools and the workers have no import circles (the
    control loop and the inference backends, the device loop and its population, the
    evaluation and its device branch imported each other); a planted one is found."""
    assert _import_circles(ROOT) == []
    root = _copy_checkout(tmp_path)
    _plant(tmp_path / "jaxsrl" / "launch" / "inference_backends.py",
           "from jaxsrl.launch.control import Run")
    assert ["jaxsrl.launch.control", "jaxsrl.launch.inference_backends"] in _import_circles(root)
