"""A base install (no extras) runs the README's main command and imports every module.

Each test runs a subprocess whose ``sitecustomize`` makes every optional package unimportable
(the extras smt and ray, and the test-only tools), as on a machine where only
``pip install -e .`` was run. CI installs every extra, so without this nothing would notice a
module that imports an extra at its top.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "solvers", "data_gen", "learners", "serving", "evaluation")
# import names of what only an extra (or the test extra) installs
OPTIONAL = ("z3", "ray", "hypothesis", "schemathesis", "pytest", "dice_ml", "alibi", "selenium", "playwright")

# Every finder of sys.meta_path is wrapped so that the optional packages are not found at all:
# ``import z3`` raises ModuleNotFoundError and ``importlib.util.find_spec("z3")`` is None, as when
# they are absent (a finder that raised instead would break libraries probing for them).
BLOCKER = textwrap.dedent(f"""
    import sys

    class _Hide:
        names = {OPTIONAL!r}

        def __init__(self, finder):
            self.finder = finder

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                return None
            find = getattr(self.finder, "find_spec", None)
            return find(name, path, target) if find else None

        def __getattr__(self, attr):
            return getattr(self.finder, attr)

    sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
""")


def _base_python(tmp_path: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _modules() -> list[str]:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    mods = []
    for f in files.stdout.split():
        parts = Path(f).with_suffix("").parts
        if parts[0] in PACKAGES:
            mods.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(mods)


def test_blocker_works(tmp_path):
    out = _base_python(tmp_path, "-c", "import importlib.util, numpy; assert importlib.util.find_spec('ray') is None; "
                                       "import z3")
    assert out.returncode != 0 and "ModuleNotFoundError: No module named 'z3'" in out.stderr


def test_every_module_imports_without_extras(tmp_path):
    mods = _modules()
    assert len(mods) > 80 and "solvers.mace.smt" in mods and "data_gen.compute" in mods
    code = textwrap.dedent(f"""
        import importlib
        failed = []
        for m in {mods!r}:
            try:
                importlib.import_module(m)
            except Exception as err:
                failed.append(f"{{m}}: {{type(err).__name__}}: {{err}}")
        print("\\n".join(failed))
        raise SystemExit(1 if failed else 0)
    """)
    out = _base_python(tmp_path, "-c", code)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_missing_extra_is_one_line_naming_it(tmp_path):
    code = textwrap.dedent("""
        from envs.optional import MissingExtraError
        from data_gen.compute import ComputeConfig, ray_init
        from solvers.mace.smt import Z3Backend
        for call in (lambda: ray_init(ComputeConfig(backend="ray")), lambda: Z3Backend(None)):
            try:
                call()
            except MissingExtraError as err:
                print(err)
    """)
    out = _base_python(tmp_path, "-c", code)
    assert out.returncode == 0, out.stderr
    ray_line, z3_line = out.stdout.strip().splitlines()
    assert "compute.backend: 'ray'" in ray_line and "pip install -e '.[ray]'" in ray_line
    assert "MACE backend: 'z3'" in z3_line and "pip install -e '.[smt]'" in z3_line


@pytest.mark.slow
def test_main_job_runs_on_a_base_install(tmp_path):
    """The README's main command (train.py, the default config's methods) on a tiny world."""
    default = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    for g in default["generators"]:
        g.setdefault("params", {})
        if "max_epochs" in g["params"]:
            g["params"]["max_epochs"] = 2
    cfg = {**default, "name": "tiny", "data_dir": str(tmp_path / "data"), "output_dir": str(tmp_path / "runs"),
           "dataset": {"n_features": 8, "n_actions": 12, "n_agents": 1500, "seed": 1},
           "evaluation": {"filters": ["all"], "solver_timing_agents": 20}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = _base_python(tmp_path, str(ROOT / "train.py"), str(path), "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "MCf [all]: optimal action set on" in out.stdout and "exact branch and bound" in out.stdout
    assert "next:" in out.stdout and "python serve.py" in out.stdout


def test_readme_python_runs_on_a_base_install(tmp_path):
    """Every Python block of the README's quick starts runs as written, without extras."""
    import re

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)
    assert len(blocks) >= 2
    for code in blocks:
        out = _base_python(tmp_path, "-c", code)
        assert out.returncode == 0, code + out.stderr


def test_a_process_that_only_answers_does_not_import_lightning():
    """Lightning is imported only where a network trains (learners/lightning_fit.py): it took 6 of the 11 s
    that importing the tabular service took, in the server, its batch worker and each Ray Serve replica."""
    code = ("import sys, serve, serving.tabular, serving.service, serving.batch_worker, learners.tabular.proposer; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout[-500:]
