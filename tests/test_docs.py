"""The README is a front door and no page carries an unfilled template token."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"@[A-Z_]+@")


def _markdown() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / f for f in out.stdout.split()]


def test_no_template_tokens():
    pages = _markdown()
    assert ROOT / "README.md" in pages and len(pages) > 10
    found = {str(p.relative_to(ROOT)): TOKEN.findall(p.read_text("utf-8")) for p in pages}
    assert {k: v for k, v in found.items() if v} == {}


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= 250
    # the two set-up commands, exactly as .ci/run runs them
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = "python -m pytest -q"
    for cmd in ("pip install torch==2.13.0 && pip install -e . && python train.py",
                f'pip install torch==2.13.0 && pip install -e ".[test]" && {test_cmd}\n'):
        assert cmd in text
    assert "\npython train.py\n" in ci and f"\n{test_cmd}\n" in ci
    # the suite on both cores, a module whole on one worker, in the order tests/conftest.py gives
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert addopts.split() == ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]


def test_readme_links_resolve():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text("utf-8")):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
